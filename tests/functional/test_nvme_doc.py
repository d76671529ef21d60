"""doc/drivers/nvme.md's configuration blocks are real: each ```ini block, as
written, is loaded by a fresh `steward`-style process and gives a working nvme
driver (the spec's snippets verbatim)."""
import os
import re
import subprocess
import sys

import pytest

from tests.fixtures import requirements

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, 'doc', 'drivers', 'nvme.md')

LOAD = '''
import json, sys, warnings
warnings.filterwarnings("ignore")
from steward.conf import CONF
CONF(["--config-file", sys.argv[1]], project="steward", default_config_files=[])
from steward.agent import drivers
from steward.common import exception
names = CONF.agent.enabled_drivers
if not {"nvme", "nvme_driver"} & set(names):
    names = ["nvme"]        # a block without [agent]: the nvme options alone
try:
    loaded = drivers.load(names, CONF, "compute-1")
    for d in loaded:
        d.init_host()
except exception.StewardError as err:
    print(json.dumps({"error": err.code, "message": str(err)}))
    sys.exit(0)
print(json.dumps({"drivers": [d.name for d in loaded],
                  "specs": [s.fields for d in loaded for s in d.specs],
                  "timeout": CONF.nvme.cleanup_timeout}))
'''


def ini_blocks():
    with open(DOC) as f:
        return re.findall(r'```ini\n(.*?)```', f.read(), re.S)


def _load(tmp_path, text):
    import json
    path = tmp_path / 'steward.conf'
    path.write_text(text)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, '-c', LOAD, str(path)], capture_output=True,
                         text=True, timeout=60, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _nvme_cli():
    if not any(os.path.exists(os.path.join(d, 'nvme'))
               for d in os.environ.get('PATH', '').split(os.pathsep) + ['/usr/sbin']):
        requirements.need('nvme', 'nvme-cli is not installed')


def test_the_spec_example_loads_verbatim(tmp_path):
    first = ini_blocks()[0]
    assert '"clear_action": "auto", "clear_strategy": "auto"}' in first
    got = _load(tmp_path, first)
    assert got['drivers'] == ['nvme']
    assert got['specs'] == [
        {'vendor_id': '8086', 'product_id': '0001', 'clear_action': 'auto',
         'clear_strategy': 'auto'},
        {'address': '*:0a:00.*'},
        {'vendor_id': '8086', 'address': '0000:0a:00.*'}]


def test_every_ini_block_loads(tmp_path):
    for block in ini_blocks():
        got = _load(tmp_path, block)
        assert 'error' not in got, (block, got)


def test_the_spec_inline_comment_form_is_refused_clearly(tmp_path):
    got = _load(tmp_path, '[nvme]\ncleanup_timeout = 900      # seconds (default: 15 '
                          'minutes)\n')
    assert got['error'] == 'cyb.config.invalid'
    assert 'own line' in got['message']

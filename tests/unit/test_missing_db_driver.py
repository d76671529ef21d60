"""A ``[database] connection`` whose driver is not installed (an API host set up
without the mysql extra) is one line naming the extra, not a traceback (issue
54, item 6). A real interpreter in which importing the driver fails, as it does
where the package is absent."""
import subprocess
import sys

import pytest

from steward.db import session

SCRIPT = '''
import sys
sys.modules[{module!r}] = None      # import {module} fails, as where it is absent
from steward.cmd import scripts
sys.argv = ['steward-manage', 'db', 'version', '--config-file', {conf!r}]
scripts.manage()
'''


@pytest.mark.parametrize('url,module,extra', [
    ('mysql+mysqldb://u:p@127.0.0.1:1/s', 'MySQLdb', 'mysql'),
    ('mysql+pymysql://u:p@127.0.0.1:1/s', 'pymysql', 'mysql'),
    ('postgresql+psycopg://u:p@127.0.0.1:1/s', 'psycopg', 'postgres'),
])
def test_a_missing_driver_names_the_extra_to_install(tmp_path, url, module, extra):
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = {url}\n')
    out = subprocess.run([sys.executable, '-c', SCRIPT.format(module=module, conf=str(conf))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    (line,) = out.stderr.strip().splitlines()
    assert f'driver {module} is not installed' in line
    assert f'steward[{extra}]' in line and f'tools/bootstrap.sh {extra}' in line


def test_a_driver_of_no_extra_is_named():
    err = ModuleNotFoundError("No module named 'pg8000'", name='pg8000')
    text = session.missing_driver('postgresql+pg8000://u:p@h/s', err)
    assert text.endswith('install the Python package that provides pg8000')

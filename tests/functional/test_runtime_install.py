"""The runtime install alone runs every command the README and doc/ print.

The suite itself runs in .venv with the test extras, which once hid a documented
command that failed on the README's install (`steward compute boot`: httpx came
only with the test extras). Here a virtualenv of its own (outside the checkout,
built fresh each run) gets Steward exactly as `./tools/serve.sh` installs it
(tools/bootstrap.sh, no extras); `./tools/serve.sh` then starts the single-host
stack from it, and the docs' ```bash blocks run as printed, with the single-host
addresses replaced by the test's free ports and `.venv/` by that virtualenv. The
configuration is where an operator without `--config-file` keeps it
(~/.steward/steward.conf, under a HOME of the test's), so `steward db sync` and
the others run without arguments, as the docs print them.

Every ```bash block of README.md and doc/ is either run here or named in
ELSEWHERE with the test that runs it or why it cannot run on one host: a newly
documented command fails test_every_documented_block_is_run until it is."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import httpx
import pytest

from tests.fixtures import requirements
from tests.fixtures.stack import ROOT, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('runtime-install')]

# Blocks run here: (document, first line of the block).
RUN = {
    # ./tools/serve.sh starts the runtime fixture's stack; the block's second line,
    # ./tools/test.sh, is .ci/run itself.
    ('README.md', './tools/serve.sh      # install into .venv, then run API + '
                  'conductor + agent + embedded Placement'),
    ('README.md', '.venv/bin/pip install python-openstackclient osc-placement    '
                  '# clients, optional'),
    ('doc/install.md', '.venv/bin/steward serve --config-file '
                       '/etc/steward/steward.conf'),
    ('doc/install.md', '.venv/bin/pip install python-openstackclient osc-placement'),
    ('doc/install.md', 'steward db sync                        # schema (Alembic, '
                       'batch mode: SQLite and PostgreSQL)'),
    ('doc/compute.md', '.venv/bin/steward serve &                                  '
                       '# the single-host stack'),
    ('doc/compute.md', "curl -s -X POST http://127.0.0.1:6666/v2/device_profiles -H "
                       "'Content-Type: application/json' \\"),
    ('doc/metrics.md', "curl -s http://127.0.0.1:6667/metrics | grep -E "
                       "'^steward_(devices|accelerator_requests|cleanups_total)'"),
    # /opt/steward -> a directory of the test's, the checkout -> this one.
    ('doc/deployment-systemd.md', 'python3 -m venv /opt/steward'),
}
# Blocks run elsewhere, or not on one host: (document, first line) -> where / why.
ELSEWHERE = {
    ('doc/multihost.md', 'git clone <steward repository> /opt/steward && cd '
                         '/opt/steward'): 'several hosts: tests/multihost',
    ('doc/multihost.md', 'apt-get install rabbitmq-server'): 'tests/multihost/rabbit.py',
    ('doc/multihost.md', 'apt-get install postgresql'): 'tests/multihost/pg.py',
    ('doc/multihost.md', 'apt-get install mariadb-server'):
        'tests/multihost/mariadb.py on tests/fixtures/mariadb_fixture.py (a server of its own, '
        'the database created utf8mb4, a password user granted on it)',
    ('doc/multihost.md', 'sudo -u postgres createdb -O steward placement'):
        'tests/multihost (Placement on PostgreSQL)',
    ('doc/multihost.md', '# once, on one controller'):
        'several hosts: tests/multihost/test_guide.py starts the services as printed',
    ('doc/multihost.md', 'curl -s http://CONTROLLER:6666/v2/devices | python3 -m '
                         "json.tool   # every host's devices"):
        'several hosts: tests/multihost/test_guide.py',
    ('doc/api.md', 'OS_STEWARD_CONFIG_DIR=/etc/steward \\'):
        'gunicorn and uvicorn hosting the app as printed, in front of RabbitMQ, a '
        'conductor and PostgreSQL: tests/functional/test_hosted_api.py',
    ('doc/multihost.md', '# /etc/steward/steward.conf holds the api.conf above, plus:'):
        'several hosts behind HAProxy: the same command and options in '
        'tests/functional/test_hosted_api.py',
    ('doc/install.md', 'git clone <steward repository> steward && cd steward'):
        'the checkout under test is that clone; its ./tools/serve.sh is how the '
        'runtime fixture starts the stack',
    ('doc/monitoring.md', 'promtool check rules etc/prometheus/steward-rules.yml'):
        'tests/unit/test_prometheus_rules.py',
    ('doc/deployment-systemd.md', 'useradd --system --user-group --home-dir '
                                  '/var/lib/steward --no-create-home \\'):
        'changes the host (/etc, users): the units are tests/unit/test_systemd_units.py',
    ('doc/deployment-systemd.md', 'install -d -m 0750 -o root -g steward /etc/steward'):
        'changes the host (/etc): tests/unit/test_systemd_units.py',
    ('doc/deployment-systemd.md', 'install -m 0644 etc/systemd/steward-conductor.service '
                                  'etc/systemd/steward-api.service /etc/systemd/system/'):
        'changes the host (/etc/systemd): tests/unit/test_systemd_units.py',
    ('doc/deployment-systemd.md', 'install -m 0644 etc/systemd/steward-agent.service '
                                  '/etc/systemd/system/'):
        'changes the host (/etc/systemd): tests/unit/test_systemd_units.py',
    ('doc/drivers/nvme.md', 'openstack accelerator device erase record list "$DEVICE"'):
        'an NVMe device (simulated): the same commands run in test_operator_docs.py',
    ('doc/drivers/nvme.md', 'openstack accelerator device clean "$DEVICE" --plan    '
                            '# which action, why; runs nothing'):
        'an NVMe device (simulated): the same commands run in test_operator_docs.py',
}
# Documents whose every block runs here section by section (cli.md: as
# test_osc_plugin.py runs it from the test install).
WHOLE = ('doc/cli.md',)
# doc/troubleshooting.md needs a device in error or a hung cleanup (a simulated
# NVMe drive): tests/functional/test_operator_docs.py runs every block of it; here
# its read-only plugin commands run from the runtime install on the fake device.
TROUBLESHOOTING = 'doc/troubleshooting.md'


def bash_blocks(name):
    """[(first line, script)] of a document's ```bash blocks."""
    with open(os.path.join(ROOT, name)) as f:
        text = f.read()
    return [(b.split('\n', 1)[0], b) for b in re.findall(r'^```bash\n(.*?)^```', text,
                                                         re.M | re.S)]


def documents():
    return ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(
        os.path.join(ROOT, 'doc', '**', '*.md'), recursive=True))


def block(name, first_line):
    found = [script for first, script in bash_blocks(name) if first == first_line]
    assert len(found) == 1, (name, first_line)
    return found[0]


def test_every_documented_block_is_run():
    unrun = []
    for name in documents():
        if name == TROUBLESHOOTING or name in WHOLE:
            continue
        for first, _ in bash_blocks(name):
            if (name, first) not in RUN and (name, first) not in ELSEWHERE:
                unrun.append((name, first))
    assert not unrun, f'documented commands no test runs: {unrun}'
    for name, first in RUN | set(ELSEWHERE):
        block(name, first)          # still printed as written here


class Runtime:
    def __init__(self, venv, home, cwd, ports, env):
        self.venv, self.home, self.cwd, self.env = venv, home, cwd, env
        self.api_port, self.placement_port, self.metrics_port = ports
        self.url = f'http://127.0.0.1:{self.api_port}'

    def script(self, text):
        """A documented block as it runs here: the test's ports and virtualenv."""
        return (text.replace('127.0.0.1:6666', f'127.0.0.1:{self.api_port}')
                .replace('127.0.0.1:8778', f'127.0.0.1:{self.placement_port}')
                .replace('127.0.0.1:6667', f'127.0.0.1:{self.metrics_port}')
                .replace('.venv/', f'{self.venv}/'))

    def run(self, text, check=True):
        out = subprocess.run(['bash', '-euo', 'pipefail', '-c', self.script(text)],
                             capture_output=True, text=True, timeout=600, env=self.env,
                             cwd=self.cwd)
        if check:
            assert out.returncode == 0, (text, out.stdout, out.stderr)
            assert 'Traceback' not in out.stderr, out.stderr
        return out


def _pip_cache():
    found = subprocess.run([sys.executable, '-m', 'pip', 'cache', 'dir'],
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


@pytest.fixture(scope='module')
def runtime():
    """A fresh runtime install and `./tools/serve.sh` running from it."""
    with tempfile.TemporaryDirectory(prefix='steward-runtime-') as tmp:
        venv = os.path.join(tmp, 'venv')
        home = os.path.join(tmp, 'home')
        cwd = os.path.join(tmp, 'work')
        os.makedirs(os.path.join(home, '.steward'))
        os.makedirs(cwd)
        ports = free_port(), free_port(), free_port()
        with open(os.path.join(home, '.steward', 'steward.conf'), 'w') as f:
            f.write(f'[DEFAULT]\nstate_path = {tmp}/state\nhost = runtime-host\n'
                    f'[api]\nport = {ports[0]}\nmetrics_listen = 127.0.0.1:{ports[2]}\n'
                    f'[placement]\nembedded_port = {ports[1]}\n')
        test_bin = os.path.dirname(sys.executable)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('OS_', 'VIRTUAL_ENV', 'PYTHON'))}
        env['PATH'] = os.pathsep.join(
            [os.path.join(venv, 'bin')] + [p for p in env.get('PATH', '').split(os.pathsep)
                                           if p and os.path.abspath(p) != test_bin])
        env['HOME'] = home
        cache = _pip_cache()
        if cache:
            env['PIP_CACHE_DIR'] = cache    # the machine's cache, not the test HOME's
        env['STEWARD_VENV'] = venv
        built = subprocess.run(['bash', 'tools/bootstrap.sh'], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=900)
        if built.returncode != 0:
            requirements.need('pypi', 'tools/bootstrap.sh could not install Steward '
                                     f'into a new virtualenv:\n{built.stderr[-3000:]}')
        log_path = os.path.join(tmp, 'serve.log')
        with open(log_path, 'w') as log:
            # README: ./tools/serve.sh; install.md: ... serve --config-file FILE (the
            # same file oslo.config finds without it).
            proc = subprocess.Popen(
                ['./tools/serve.sh', '--config-file',
                 os.path.join(home, '.steward', 'steward.conf')],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        rt = Runtime(venv, home, cwd, ports, env)
        rt.log_path = log_path

        def ready():
            assert proc.poll() is None, open(log_path).read()[-3000:]
            try:
                return httpx.get(f'{rt.url}/v2/deployables', timeout=2,
                                 trust_env=False).json().get('deployables')
            except (httpx.HTTPError, ValueError):
                return None
        try:
            wait_for(ready, 'steward serve from the runtime install', timeout=120)
            yield rt
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def test_runtime_install_has_no_test_extras(runtime):
    for module in ('pytest', 'httpx'):
        out = subprocess.run([os.path.join(runtime.venv, 'bin', 'python'), '-c',
                              f'import {module}'], capture_output=True, text=True)
        assert out.returncode != 0, f'{module} is in the runtime install'


def test_upgrade_commands(runtime):
    out = runtime.run(block('doc/install.md', 'steward db sync                        '
                                              '# schema (Alembic, batch mode: SQLite '
                                              'and PostgreSQL)'))
    assert 'Database at revision' in out.stdout
    assert 'All online data migrations complete.' in out.stdout
    assert 'Success' in out.stdout


@pytest.fixture(scope='module')
def clients(runtime):
    """The README's `pip install` line and the client commands after it."""
    out = runtime.run(block('README.md', '.venv/bin/pip install python-openstackclient '
                                         'osc-placement    # clients, optional'))
    return out.stdout


def test_readme_client_commands(runtime, clients):
    assert 'FPGA' in clients                            # accelerator device list
    assert 'runtime-host_FakeDevice' in clients         # resource provider list
    assert "openstack.accelerator.v2.device.Device" in clients or "Device(" in clients


def test_install_check_it_works(runtime, clients):
    out = runtime.run(block('doc/install.md', '.venv/bin/pip install '
                                              'python-openstackclient osc-placement'))
    assert 'runtime-host_FakeDevice' in out.stdout


def test_cli_doc(runtime, clients):
    from tests.functional.test_osc_plugin import doc_sections
    sections = doc_sections()
    assert 'Connecting' in sections and 'Accelerator requests (ARQs)' in sections
    env = dict(runtime.env, OS_AUTH_TYPE='none', OS_ENDPOINT=runtime.url + '/v2')
    for title, script in sorted(sections.items()):
        out = subprocess.run(['bash', '-euo', 'pipefail', '-c', runtime.script(script)],
                             capture_output=True, text=True, timeout=300, env=env,
                             cwd=runtime.cwd)
        assert out.returncode == 0, (title, out.stdout, out.stderr)
        assert 'Traceback' not in out.stderr, (title, out.stderr)
        expected = re.findall(r'^# (exit code \d+)$', script, re.MULTILINE)
        assert re.findall(r'^exit code \d+$', out.stdout, re.MULTILINE) == expected, title


def test_compute_boot_list_delete(runtime, clients):
    first = '.venv/bin/steward serve &                                  ' \
            '# the single-host stack'
    # The stack the block starts is the one already running from ./tools/serve.sh.
    script = block('doc/compute.md', first).replace(first + '\n', '')
    out = runtime.run(script)
    assert 'Instance vm1' in out.stdout and '<domain' in out.stdout, out.stdout
    assert 'Accelerator requests (Bound):' in out.stdout
    out = runtime.run(block('doc/compute.md', "curl -s -X POST "
                                              "http://127.0.0.1:6666/v2/device_profiles "
                                              "-H 'Content-Type: application/json' \\"))
    assert 'dp-fake' in out.stdout       # 409: the profile of the block above


def test_metrics(runtime):
    out = runtime.run(block('doc/metrics.md', "curl -s http://127.0.0.1:6667/metrics | "
                                              "grep -E '^steward_(devices|accelerator_"
                                              "requests|cleanups_total)'"))
    assert 'steward_devices{host="runtime-host",state="available",type="FPGA"}' in out.stdout


def test_troubleshooting_plugin_commands(runtime, clients):
    """The read-only plugin commands of troubleshooting.md's "What to read", on the
    fake device (test_operator_docs.py runs them on a device in error)."""
    [device] = httpx.get(f'{runtime.url}/v2/devices', trust_env=False,
                         timeout=60).json()['devices']
    parts = [script for first, script in bash_blocks(TROUBLESHOOTING)]
    preamble = parts[0]
    assert preamble.startswith('export OS_AUTH_TYPE=none'), preamble
    reads = [line for line in parts[1].splitlines() if line.startswith('openstack ')]
    assert len(reads) == 4, reads
    out = runtime.run(preamble + f'DEVICE={device["uuid"]}\n' + '\n'.join(reads))
    assert device['uuid'] in out.stdout and 'available' in out.stdout


def test_systemd_install_block(runtime, tmp_path):
    """deployment-systemd.md's install: a plain (not editable) pip install of the
    checkout, which carries the package data (migrations, alembic.ini) itself."""
    script = block('doc/deployment-systemd.md', 'python3 -m venv /opt/steward')
    script = script.replace('/opt/steward', str(tmp_path / 'opt-steward')).replace(
        '/path/to/steward-checkout', ROOT)
    out = runtime.run(script)
    assert 'serve' in out.stdout and 'db sync' in out.stdout
    # The installed copy finds its migrations without the checkout.
    conf = tmp_path / 'db.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}/state\n')
    synced = subprocess.run([str(tmp_path / 'opt-steward' / 'bin' / 'steward'), 'db', 'sync',
                             '--config-file', str(conf)], capture_output=True, text=True,
                            cwd=str(tmp_path), env=runtime.env, timeout=300)
    assert synced.returncode == 0 and 'Database at revision' in synced.stdout, synced

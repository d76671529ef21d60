"""The console scripts every OpenStack service ships (steward-api, -conductor,
-agent, -manage, -status) as an operator runs them: the scripts the venv
installed, as real subprocesses."""
import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from tests.fixtures import stack
from tests.multihost import rabbit as rabbit_mod

BIN = os.path.dirname(sys.executable)


def script(name, *args, conf=None):
    extra = ['--config-file', str(conf)] if conf is not None else []
    return subprocess.run([os.path.join(BIN, name), *args, *extra], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / 'steward.conf'
    path.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n')
    return path


def test_steward_manage_db(conf):
    from steward.db import migration
    out = script('steward-manage', 'db', 'sync', conf=conf)
    assert out.returncode == 0, out.stderr
    assert f'revision {migration.head_revision()}' in out.stdout
    out = script('steward-manage', 'db', 'version', conf=conf)
    assert out.stdout.strip() == migration.head_revision()
    # nova-manage's spelling and Steward's.
    for action in ('online_data_migrations', 'online-data-migrations'):
        out = script('steward-manage', 'db', action, conf=conf)
        assert out.returncode == 0, out.stderr
        assert 'All online data migrations complete.' in out.stdout
    assert script('steward-manage', 'db', 'import-cyborg', '-h').returncode == 0


@pytest.mark.parametrize('argv', [[], ['db'], ['db', 'drop'], ['schema', 'sync']])
def test_steward_manage_bad_usage(argv, conf):
    out = script('steward-manage', *argv, conf=conf)
    assert out.returncode == 2
    assert 'usage:' in out.stderr and 'Traceback' not in out.stderr


def test_steward_status_upgrade_check(conf, tmp_path):
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 2, out.stdout + out.stderr        # no schema yet
    checks = {c['check']: c['result'] for c in json.loads(out.stdout)['checks']}
    assert checks == {'Database schema': 2, 'Online data migrations': 2,
                      'Policy File JSON to YAML Migration': 0,
                      'Cyborg options Steward ignores': 0,
                      'Profiles split across pools': 0}
    assert script('steward-manage', 'db', 'sync', conf=conf).returncode == 0
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(c['result'] == 0 for c in json.loads(out.stdout)['checks'])
    # The table, and the same code under `steward status`, options before or after.
    out = script('steward-status', 'upgrade', 'check', conf=conf)
    assert out.returncode == 0 and 'Result: Success' in out.stdout
    out = subprocess.run([os.path.join(BIN, 'steward'), 'status', '--config-file',
                          str(conf), 'upgrade', 'check'], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.count('Result: Success') == 5

    # A Cyborg option Steward ignores, in a file of --config-dir: a warning.
    conf_d = tmp_path / 'steward.conf.d'
    conf_d.mkdir()
    (conf_d / 'from-cyborg.conf').write_text('[glance]\nnum_retries = 3\n')
    out = script('steward-status', 'upgrade', 'check', '--json', '--config-dir',
                 str(conf_d), conf=conf)
    assert out.returncode == 1, out.stdout + out.stderr
    checks = {c['check']: c for c in json.loads(out.stdout)['checks']}
    assert '[glance] num_retries' in checks['Cyborg options Steward ignores']['details']

    # A JSON policy file fails the policy check (oslo.upgradecheck's own).
    policy = tmp_path / 'policy.json'
    policy.write_text('{"cyborg:device:get_all": "rule:admin_api"}')
    conf.write_text(conf.read_text() + f'[oslo_policy]\npolicy_file = {policy}\n')
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 2
    checks = {c['check']: c for c in json.loads(out.stdout)['checks']}
    assert checks['Policy File JSON to YAML Migration']['result'] == 2
    assert 'oslopolicy-convert-json-to-yaml' in \
        checks['Policy File JSON to YAML Migration']['details']


@pytest.mark.parametrize('argv', [['upgrade'], ['check'], ['downgrade', 'check'],
                                  ['upgrade', 'check', '--no-such-option'],
                                  ['upgrade', 'check', '--config-file', '/nonexistent']])
def test_steward_status_bad_usage(argv):
    out = script('steward-status', *argv)
    assert out.returncode == 2
    assert out.stderr and 'Traceback' not in out.stderr + out.stdout


def test_version_comes_from_the_installed_distribution(tmp_path):
    # Asked as the scripts ask, outside the checkout: a build's steward.egg-info
    # left in the checkout would answer for the source tree instead.
    version = subprocess.run(
        [sys.executable, '-c', 'import importlib.metadata as m; print(m.version("steward"))'],
        capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    for argv in (['steward', '--version'], ['steward-manage', '--version']):
        out = subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], capture_output=True,
                             text=True)
        assert out.returncode == 0 and out.stdout.strip() == version
    # setuptools-scm's, from git (the checkout is a clone): it names the commit.
    assert re.search(r'\+g[0-9a-f]{7,}', version), version


def _log_says(path, text):
    return lambda: text in path.read_text()


@pytest.fixture
def rabbit(tmp_path):
    with rabbit_mod.running(tmp_path / 'rabbit') as server:
        yield server


def test_api_conductor_and_agent_scripts_run_a_control_plane(rabbit, tmp_path):
    """steward-conductor, steward-agent and steward-api, one process each on a real
    broker: the agent's fake devices reach the API."""
    port = stack.free_port()
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\nhost = scripts-host\n'
                    f'transport_url = {rabbit.url()}\n'
                    f'[api]\nport = {port}\nmetrics_listen =\n'
                    '[placement]\ncreate_compute_node = false\n')
    assert script('steward-manage', 'db', 'sync', conf=conf).returncode == 0
    procs = {}
    try:
        for name in ('steward-conductor', 'steward-agent', 'steward-api'):
            log = open(tmp_path / f'{name}.log', 'w')
            procs[name] = subprocess.Popen([os.path.join(BIN, name), '--config-file',
                                            str(conf)], stdout=log,
                                           stderr=subprocess.STDOUT)
            log.close()
            if name == 'steward-conductor':
                # An agent's first call to a conductor queue not declared yet
                # would be dropped by the broker (and time out a minute later).
                stack.wait_for(_log_says(tmp_path / f'{name}.log', 'serving topic'),
                               name, timeout=60)

        def devices():
            for name, proc in procs.items():
                assert proc.poll() is None, (tmp_path / f'{name}.log').read_text()[-3000:]
            try:
                r = httpx.get(f'http://127.0.0.1:{port}/v2/devices', timeout=2)
            except httpx.HTTPError:
                return None
            return r.status_code == 200 and r.json()['devices']
        found = stack.wait_for(devices, 'the agent\'s devices in the API', timeout=90)
        assert {d['hostname'] for d in found} == {'scripts-host'}
    finally:
        status = {name: stack.stop_child(proc, timeout=30) for name, proc in procs.items()}
    assert status == dict.fromkeys(procs, 0)
    for name in procs:
        assert 'Traceback' not in (tmp_path / f'{name}.log').read_text(), name


@pytest.mark.parametrize('argv', [['steward-api'], ['steward-conductor'], ['steward-agent'],
                                  ['steward-manage', 'db', 'sync'],
                                  ['steward-status', 'upgrade', 'check']])
def test_a_missing_or_bad_configuration_is_one_line(argv, tmp_path):
    out = script(*argv, '--config-file', str(tmp_path / 'missing.conf'))
    assert out.returncode == 2
    assert 'missing.conf' in out.stderr and 'Traceback' not in out.stderr
    # Cyborg's name with a value of the wrong type.
    bad = tmp_path / 'bad.conf'
    bad.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n'
                   'transport_url = rabbit://u:p@127.0.0.1:1/\n[api]\napi_workers = two\n')
    if argv[0] == 'steward-api':
        out = script(*argv, conf=bad)
        assert out.returncode == 2
        assert 'option workers' in out.stderr and 'bad.conf' in out.stderr
        assert 'Traceback' not in out.stderr


def test_steward_status_on_a_database_it_cannot_reach(tmp_path):
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = '
                    f'postgresql+psycopg2://u:p@127.0.0.1:{stack.free_port()}/steward\n')
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 2 and 'Traceback' not in out.stdout + out.stderr
    checks = {c['check']: c for c in json.loads(out.stdout)['checks']}
    assert checks['Database schema']['details'].startswith('Cannot read the database')


def test_steward_status_names_profiles_a_pool_cannot_take(conf, tmp_path):
    """Issue 52: once a resource class is pooled, a profile of several one-unit
    groups of it cannot land on one pool under group_policy=isolate; the check
    warns (exit 1) and names the profile with the one to write instead."""
    from steward.db import attributes as attribute_db
    from steward.db import device_profiles as profile_db
    from steward.db import models as m
    from steward.db import session
    assert script('steward-manage', 'db', 'sync', conf=conf).returncode == 0
    database = session.Database(f'sqlite:///{tmp_path}/steward.sqlite')
    with database.writer() as s:
        profile_db.device_profile_create(s, 'split', [{'resources:PGPU': '1'}] * 4)
        profile_db.device_profile_create(s, 'whole', [{'resources:PGPU': '4'}])
        profile_db.device_profile_create(s, 'other', [{'resources:FPGA': '1'}] * 2)
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 0, out.stdout       # nothing pooled: nothing to say
    with database.writer() as s:
        dev = m.Device(uuid='d1', type='PCI', vendor='10de', model='2330', hostname='h',
                       status='enabled', device_state='available')
        s.add(dev)
        s.flush()
        dep = m.Deployable(uuid='dep1', name='h_0000:18:00.0', num_accelerators=1,
                           device_id=dev.id, rp_uuid='rp1')
        s.add(dep)
        s.flush()
        attribute_db.attribute_create(s, dep.id, 'rc', 'PGPU')
        attribute_db.attribute_create(s, dep.id, 'pool', 'h_PGPU_numa0_x')
    out = script('steward-status', 'upgrade', 'check', '--json', conf=conf)
    assert out.returncode == 1, out.stdout + out.stderr
    (check,) = [c for c in json.loads(out.stdout)['checks']
                if c['check'] == 'Profiles split across pools']
    assert check['result'] == 1
    assert 'split (4 one-unit groups of PGPU: write [{"resources:PGPU": "4"}]' \
        in check['details']
    assert 'whole' not in check['details'] and 'other' not in check['details']

"""A cloud's cyborg.conf works as Steward's configuration: the sample generated from
the real openstack-cyborg 17.0.0 package, filled in and handed to Steward's
commands (steward/conf/cyborg_compat.py; doc/switching-from-cyborg.md)."""
import json
import os
import subprocess
import sys

import httpx
import pytest

from steward.conf import cyborg_compat
from tests.fixtures import config_sample
from tests.fixtures import requirements
from tests.fixtures import side_venv
from tests.fixtures import stack

BIN = os.path.dirname(sys.executable)

# Cyborg's options Steward reads under another group or name: the value written
# under Cyborg's name, and (Steward group, option, the value Steward must see).
RENAMED = {
    ('api', 'api_workers'): ('3', [('api', 'workers', 3)]),
    ('DEFAULT', 'bind_timeout'): ('45', [('DEFAULT', 'rpc_response_timeout_bind', 45)]),
    # Cyborg's one interval of its periodic tasks: the agent's report and the
    # conductor's tasks.
    ('DEFAULT', 'periodic_interval'): ('17', [('agent', 'discovery_interval', 17),
                                              ('conductor', 'periodic_interval', 17.0)]),
    ('gpu_devices', 'enabled_vgpu_types'): (
        'nvidia-35', [('nvidia_gpu', 'enabled_vgpu_types', ['nvidia-35'])]),
}

# Options of the same group and name in both: a sample of them, with a value each.
SAME = {
    ('DEFAULT', 'host'): ('cyborg-compute-1', 'cyborg-compute-1'),
    ('DEFAULT', 'debug'): ('true', True),
    ('DEFAULT', 'transport_url'): ('rabbit://cyborg:secret@mq.example:5672/',
                                   'rabbit://cyborg:secret@mq.example:5672/'),
    ('api', 'host_ip'): ('127.0.0.2', '127.0.0.2'),
    ('api', 'port'): ('16666', 16666),
    ('api', 'public_endpoint'): ('https://cloud.example/accelerator',
                                 'https://cloud.example/accelerator'),
    ('agent', 'enabled_drivers'): ('fake_driver', ['fake_driver']),
    ('agent', 'resource_provider_name'): ('cn-1.example', 'cn-1.example'),
    ('nvme', 'cleanup_timeout'): ('1200', 1200),
    ('placement', 'endpoint_override'): ('http://placement.example:8778',
                                         'http://placement.example:8778'),
    ('placement', 'region_name'): ('RegionTwo', 'RegionTwo'),
    ('nova', 'region_name'): ('RegionTwo', 'RegionTwo'),
}

# Options Steward ignores, set as a Cyborg deployment might have them.
IGNORED_SET = {
    ('api', 'api_paste_config'): '/etc/cyborg/api-paste.ini',
    ('DEFAULT', 'thread_pool_size'): '20',
    ('glance', 'num_retries'): '3',
    ('gpu_devices', 'filter_sriov_vfs'): 'true',
    ('service_user', 'send_service_user_token'): 'true',
}

READ_OPTIONS = """
import json, sys
from steward import process
from steward.conf import CONF, nvidia
process.prepare(['--config-file', sys.argv[1]])
nvidia.register_vgpu_groups(CONF)
print(json.dumps([CONF[n] if g == 'DEFAULT' else CONF[g][n]
                  for g, n in json.loads(sys.argv[2])]))
"""


@pytest.fixture(scope='module')
def cyborg_sample(tmp_path_factory):
    try:
        side_venv.ensure('cyborg')
    except side_venv.BuildError as exc:
        requirements.need('cyborg', f'openstack-cyborg 17.0.0 venv: {exc}')
    path = tmp_path_factory.mktemp('cyborg') / 'cyborg.conf.sample'
    return config_sample.cyborg_sample(path).read_text()


def _cyborg_conf(sample, values):
    text = sample
    for (group, name), value in values.items():
        text = config_sample.set_option(text, group, name, value)
    return text


def test_every_cyborg_option_is_read_or_listed_as_ignored(cyborg_sample, tmp_path):
    cyborg, _ = config_sample.options(cyborg_sample)
    listed, aliases = config_sample.options(
        config_sample.steward_sample(tmp_path / 'steward.conf.sample').read_text())
    accepted = listed | aliases
    unknown = sorted(o for o in cyborg - accepted if cyborg_compat.ignored(*o) is None)
    assert not unknown, ('Cyborg 17 options Steward neither reads nor lists in '
                         f'steward/conf/cyborg_compat.py: {unknown}')
    stale = sorted(o for o in cyborg & accepted if cyborg_compat.ignored(*o) is not None)
    assert not stale, ('listed as ignored in steward/conf/cyborg_compat.py but read '
                       f'by Steward: {stale}')
    not_cyborgs = sorted(set(cyborg_compat.IGNORED_OPTIONS) - cyborg) + sorted(
        set(cyborg_compat.IGNORED_GROUPS) - {group for group, _ in cyborg})
    assert not not_cyborgs, f'not options of Cyborg 17: {not_cyborgs}'
    # Every Cyborg name read under another has its value checked below (but
    # keystoneauth's own old names of project_id/project_name, in both).
    renamed = {(g, n) for g, n in (aliases & cyborg) - listed
               if n not in ('tenant_id', 'tenant_name')}
    assert renamed == set(RENAMED)


def test_cyborg_conf_takes_effect(cyborg_sample, tmp_path):
    conf = tmp_path / 'steward.conf'
    values = {key: value for key, (value, _) in RENAMED.items()}
    values.update({key: value for key, (value, _) in SAME.items()})
    values[('DEFAULT', 'state_path')] = str(tmp_path)
    conf.write_text(_cyborg_conf(cyborg_sample, values)
                    + '\n[vgpu_nvidia-35]\ndevice_addresses = 0000:84:00.0\n')
    expected = [t for _, targets in RENAMED.values() for t in targets]
    expected += [(g, n, v) for (g, n), (_, v) in SAME.items()]
    expected.append(('vgpu_nvidia-35', 'device_addresses', ['0000:84:00.0']))
    out = subprocess.run([sys.executable, '-c', READ_OPTIONS, str(conf),
                          json.dumps([(g, n) for g, n, _ in expected])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert {(g, n): v for (g, n, _), v in zip(expected, seen)} == \
        {(g, n): v for g, n, v in expected}


def test_upgrade_check_names_the_ignored_options(cyborg_sample, tmp_path):
    conf = tmp_path / 'steward.conf'
    values = dict(IGNORED_SET)
    values[('api', 'api_workers')] = '2'
    values[('DEFAULT', 'state_path')] = str(tmp_path)
    conf.write_text(_cyborg_conf(cyborg_sample, values))
    sync = subprocess.run([os.path.join(BIN, 'steward-manage'), 'db', 'sync',
                           '--config-file', str(conf)], capture_output=True, text=True)
    assert sync.returncode == 0, sync.stderr
    out = subprocess.run([os.path.join(BIN, 'steward-status'), 'upgrade', 'check',
                          '--json', '--config-file', str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr       # a warning
    checks = {c['check']: c for c in json.loads(out.stdout)['checks']}
    warning = checks.pop('Cyborg options Steward ignores')
    assert warning['result'] == 1
    named = {f'[{g}] {n}' for g, n in IGNORED_SET}
    assert {n for n in named if n in warning['details']} == named
    assert '[api] api_workers' not in warning['details']      # read as [api] workers
    assert all(c['result'] == 0 for c in checks.values()), checks


def test_steward_api_runs_the_workers_of_cyborg_api_workers(cyborg_sample, tmp_path):
    port = stack.free_port()
    conf = tmp_path / 'steward.conf'
    conf.write_text(_cyborg_conf(cyborg_sample, {
        ('DEFAULT', 'state_path'): str(tmp_path),
        # No conductor: the API starts without its broker.
        ('DEFAULT', 'transport_url'): f'rabbit://u:p@127.0.0.1:{stack.free_port()}/',
        ('api', 'port'): str(port), ('api', 'api_workers'): '2'}))
    subprocess.run([os.path.join(BIN, 'steward-manage'), 'db', 'sync',
                    '--config-file', str(conf)], check=True, capture_output=True)
    log_path = tmp_path / 'api.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen([os.path.join(BIN, 'steward-api'), '--config-file',
                                 str(conf)], stdout=log, stderr=subprocess.STDOUT)

    def answering():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            return httpx.get(f'http://127.0.0.1:{port}/v2', timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    try:
        stack.wait_for(answering, 'steward-api', timeout=60)
        assert len(stack.children(proc.pid)) == 2
    finally:
        assert stack.stop_child(proc, timeout=30) == 0

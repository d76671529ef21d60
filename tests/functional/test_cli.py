"""The ``steward`` command line as a real subprocess: service management and
``steward compute`` only. The client commands are ``openstack accelerator ...``
(tests/functional/test_osc_plugin.py); the old ``steward device|deployable|
profile|arq`` ones are gone. The progress helper of ``--wait`` is tested in
tests/unit/test_progress.py."""
import os
import subprocess
import sys

import pytest

STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')
SERVICE_COMMANDS = ('serve', 'api', 'conductor', 'agent', 'db sync', 'status upgrade check',
                    'compute')


def steward(*args):
    return subprocess.run([STEWARD, *args], capture_output=True, text=True, timeout=60)


def test_help_lists_the_service_commands_and_points_to_openstack_accelerator():
    out = steward('--help')
    assert out.returncode == 0, out.stderr
    for cmd in SERVICE_COMMANDS:
        assert cmd in out.stdout, cmd
    assert 'openstack accelerator' in out.stdout and 'doc/cli.md' in out.stdout
    for gone in ('deployable list', 'profile create', 'arq list'):
        assert gone not in out.stdout


@pytest.mark.parametrize('resource', ['device', 'deployable', 'profile', 'arq'])
def test_the_old_client_commands_are_gone(resource):
    out = steward(resource, 'list')
    assert out.returncode == 2
    assert 'Traceback' not in out.stderr
    assert 'openstack accelerator' in out.stderr       # the usage says where they went


def test_no_command_is_usage_and_compute_stays():
    assert steward().returncode == 2
    out = steward('compute', '--help')
    assert out.returncode == 0 and 'boot' in out.stdout and 'delete' in out.stdout


def test_the_removed_modules_are_gone():
    import importlib.util
    for name in ('steward.cmd.device', 'steward.cmd.device_listing', 'steward.cmd.arq',
                 'steward.cmd.deployable', 'steward.cmd.profile', 'steward.client'):
        assert importlib.util.find_spec(name) is None, name
    from steward.cmd import main
    assert set(main.COMMANDS) == {'serve', 'api', 'conductor', 'agent', 'db', 'status',
                                  'compute'}

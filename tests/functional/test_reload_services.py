"""SIGHUP reloads a running `steward conductor` and `steward agent` (real processes,
a real RabbitMQ node, the real Placement): each stays up with the same pid, its
new option values act, the agent's privsep daemons survive, and every discovery
report after the signal is an RPC round trip between the two reloaded processes.
A file that does not parse keeps each one on the configuration in force."""
import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from steward.placement import handle as embedded
from tests.functional.test_reload import DEADLINE, append, debug_lines, \
    discovery_cycles
from tests.multihost import rabbit
from tests.multihost.cluster import Service
from tests.nvme_sim import simulation_for_test
from tests.fixtures.stack import children, wait_for

pytestmark = pytest.mark.slow
HOST = 'reload-host'


@pytest.fixture
def broker():
    rabbit.require()
    server = rabbit.RabbitServer().start()
    yield server
    server.destroy()


@pytest.fixture
def placement(tmp_path):
    proc = embedded.start_subprocess(f'sqlite:///{tmp_path}/placement.sqlite', '127.0.0.1',
                                     rabbit.free_port(),
                                     log_file=str(tmp_path / 'placement.log'))
    yield proc.url
    proc.stop()


def _write(path, sections):
    path.write_text(''.join(f'[{name}]\n' + ''.join(f'{k} = {v}\n' for k, v in opts.items())
                            for name, opts in sections.items()))
    return str(path)


def _reloaded(svc, marker, since):
    wait_for(lambda: marker in svc.log_since(since) or not svc.alive(),
             f'{marker!r} in the {svc.name} log', timeout=DEADLINE)
    assert svc.alive(), svc.log()[-3000:]
    return svc.log_since(since)


def test_conductor_and_agent_reload_on_sighup(tmp_path, broker, placement):
    sim = simulation_for_test(tmp_path / 'sim')
    sim.add_controller(address='0000:0a:00.0')
    metrics_port = rabbit.free_port()
    metrics = f'http://127.0.0.1:{metrics_port}/metrics'
    common = {'transport_url': broker.url()}
    (tmp_path / 'conductor').mkdir()
    conductor = Service('conductor', 'conductor', _write(tmp_path / 'conductor.conf', {
        'DEFAULT': {**common, 'host': 'reload-ctl',
                    'state_path': tmp_path / 'conductor'},
        'placement': {'auth_type': 'admin_token', 'endpoint': placement, 'token': 'admin',
                      'endpoint_override': placement},
        'conductor': {'periodic_interval': 3600}}), str(tmp_path / 'conductor.log'))
    (tmp_path / 'agent').mkdir()
    agent_conf = _write(tmp_path / 'agent.conf', {
        'DEFAULT': {**common, 'host': HOST, 'state_path': tmp_path / 'agent',
                    'sysfs_root': sim.sysfs_root, 'dev_root': sim.dev_root},
        'agent': {'enabled_drivers': 'fake, nvme', 'discovery_interval': 3600,
                  'metrics_listen': f'127.0.0.1:{metrics_port}'},
        'nvme': {'device_spec': json.dumps({'vendor_id': '8086'}),
                 'nvme_cli': sim.nvme_cli}})
    agent = Service('agent', 'agent', agent_conf, str(tmp_path / 'agent.log'),
                    env=dict(sim.env))
    # The operator's step before a conductor starts (it does not migrate at start).
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'steward'), 'db', 'sync',
                    '--config-file', conductor.conf_path], check=True, capture_output=True,
                   timeout=300)
    conductor.start()
    try:
        wait_for(lambda: not conductor.alive() or
                 broker.consumers('steward-conductor') == 1,
                 'the conductor on the broker', timeout=DEADLINE)
        assert conductor.alive(), conductor.log()[-3000:]
        agent.start()
        # The first discovery, at start: the nvme driver's reads go through the
        # privsep daemons, the report to the conductor over RabbitMQ.
        wait_for(lambda: not agent.alive() or _cycles(metrics) == 1, 'the first report',
                 timeout=DEADLINE)
        assert agent.alive(), agent.log()[-3000:]
        daemons = sorted(children(agent.pid))
        assert len(daemons) == 2, daemons       # nvme_admin and block_io
        pids = conductor.pid, agent.pid

        # The conductor: debug on, oslo.messaging's DEBUG lines on, and periodic
        # tasks every half second instead of hourly.
        append(conductor.conf_path, '[DEFAULT]\ndebug = true\n'
               'default_log_levels = oslo_messaging=DEBUG\n'
               '[conductor]\nperiodic_interval = 0.5\n')
        since_c = conductor.log_size()
        os.kill(conductor.pid, signal.SIGHUP)
        text = _reloaded(conductor, 'Configuration reloaded', since_c)
        assert 'Option conductor.periodic_interval changed from [3600] to [0.5]' in text
        wait_for(lambda: 'steward-conductor-periodic: interval now 0.5s' in
                 conductor.log_since(since_c), 'the new periodic interval')

        # The agent, signalled as its whole process group (its privsep daemons
        # with it): discovery every second instead of hourly.
        append(agent_conf, '[DEFAULT]\ndebug = true\n'
               'default_log_levels = oslo_messaging=DEBUG\n'
               '[agent]\ndiscovery_interval = 1\n')
        since_a = agent.log_size()
        os.killpg(agent.pid, signal.SIGHUP)
        text = _reloaded(agent, 'Configuration reloaded', since_a)
        assert 'Option agent.discovery_interval changed from [3600] to [1]' in text
        # Reports every second: each an RPC call answered by the reloaded conductor,
        # each with NVMe reads through the same privsep daemons.
        wait_for(lambda: _cycles(metrics) >= 4, 'reports every second', timeout=DEADLINE)
        assert sorted(children(agent.pid)) == daemons
        wait_for(lambda: debug_lines(agent.log_since(since_a), agent.pid) and
                 debug_lines(conductor.log_since(since_c), conductor.pid),
                 'DEBUG lines in both logs', timeout=DEADLINE)

        # Broken files: each keeps its configuration and serves on.
        for svc in (conductor, agent):
            append(svc.conf_path, '[agent\ndiscovery_interval = 3600\n')
            since = svc.log_size()
            os.kill(svc.pid, signal.SIGHUP)
            text = _reloaded(svc, 'Configuration reload failed', since)
            assert ' ERROR steward.reload ' in text
        counted = _cycles(metrics)
        wait_for(lambda: _cycles(metrics) >= counted + 2,
                 'reports after the failed reloads', timeout=DEADLINE)
        assert (conductor.pid, agent.pid) == pids
        assert sorted(children(agent.pid)) == daemons
        for svc in (conductor, agent):
            assert 'Traceback' not in svc.log(), svc.log()[-3000:]
    finally:
        agent.stop()
        conductor.stop()
        sim.close()
    assert agent.proc.returncode == 0 and conductor.proc.returncode == 0


def _cycles(metrics):
    try:
        return discovery_cycles(metrics, HOST)
    except httpx.HTTPError:
        return 0.0      # the agent's metrics endpoint not up yet

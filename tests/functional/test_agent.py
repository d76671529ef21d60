"""The agent: driver loading, the discovery loop and its interval."""
import threading
import time

import pytest

from steward.agent import drivers as driver_loader
from steward.agent.manager import AgentManager
from steward.common import exception
from steward.conductor.local_api import LocalConductorAPI
from steward.drivers.fake import FakeDriver
from tests.functional import conductor_fixtures as cf


class CountingFake(FakeDriver):
    calls = 0
    started = []                        # time.monotonic() of each discover()
    changed = threading.Condition()

    def discover(self):
        with self.changed:
            type(self).calls += 1
            self.started.append(time.monotonic())
            self.changed.notify_all()
        return super().discover()


def test_discovery_interval_is_honoured(transport, database, db, conf):
    conf.set_override('discovery_interval', 1, group='agent')
    conductor, _ = cf.stack(database, transport, conf)
    CountingFake.calls, CountingFake.started = 0, []
    agent = AgentManager(conf, LocalConductorAPI(conductor), host='host-a',
                         drivers=[CountingFake(conf, 'host-a')])
    agent.start()
    try:
        # Three cycles come (with the 60 s default the second would be a minute
        # away: the wait gives up long before) ...
        with CountingFake.changed:
            assert CountingFake.changed.wait_for(lambda: CountingFake.calls >= 3,
                                                 timeout=30), CountingFake.calls
            started = list(CountingFake.started)
    finally:
        agent.stop()
    # ... and not back to back: the loop waited the interval between them.
    assert all(b - a >= 0.95 for a, b in zip(started, started[1:])), started
    assert agent.cycles >= 2


def test_upstream_driver_names_are_accepted(conf):
    assert [d.name for d in driver_loader.load(['fake_driver'], conf, 'h')] == ['fake']


def test_unknown_driver_is_a_clear_configuration_error(conf):
    with pytest.raises(exception.InvalidConfiguration, match="'nosuch'"):
        driver_loader.load(['nosuch'], conf, 'h')


def test_same_device_from_two_drivers_is_refused(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    agent = AgentManager(conf, LocalConductorAPI(conductor), host='host-a',
                         drivers=[FakeDriver(conf, 'host-a'), CountingFake(conf, 'host-a')])
    with pytest.raises(exception.InvalidConfiguration, match='0000:0c:00.0 is reported by both fake and fake'):
        agent.discover()


def test_mdev_capable_drivers_share_a_parent_first_wins(transport, database, db, conf, caplog):
    class A(FakeDriver):
        name, shares_parents = 'mdev', True

    class B(FakeDriver):
        name, shares_parents = 'nvidia_gpu', True

    conductor, _ = cf.stack(database, transport, conf)
    agent = AgentManager(conf, LocalConductorAPI(conductor), host='host-a',
                         drivers=[A(conf, 'host-a'), B(conf, 'host-a')])
    devices = agent.discover()
    assert [d.driver_name for d in devices] == ['fake']      # A's copy, the first
    assert 'keeps it' in caplog.text and 'mdev (listed first)' in caplog.text


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_agent_that_cannot_do_its_job_exits(tmp_path):
    """Two drivers claiming one device is found by the first discovery, after the
    RPC server is up: the process must stop with a failure status and one clear
    line, not live on as an RPC server whose discovery thread died (here in
    `steward serve`, whose agent shares the process with the API)."""
    import os
    import subprocess
    import sys
    conf = tmp_path / 'serve.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n'
                    f'[api]\nport = {_free_port()}\nmetrics_listen = 127.0.0.1:{_free_port()}\n'
                    f'[placement]\nembedded_port = {_free_port()}\n'
                    f'[agent]\nenabled_drivers = fake, fake_driver\n')
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')
    out = subprocess.run([steward, 'serve', '--config-file', str(conf)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, (out.stdout, out.stderr)
    log = out.stdout + out.stderr
    lines = [ln for ln in log.splitlines() if 'invalid configuration' in ln]
    assert len(lines) == 1 and 'is reported by both fake and fake' in lines[0], log
    assert 'Traceback' not in log

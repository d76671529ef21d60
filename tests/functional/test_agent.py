"""The agent: driver loading, the discovery loop and its interval."""
import time

import pytest

from steward.agent import drivers as driver_loader
from steward.agent.manager import AgentManager
from steward.common import exception
from steward.conductor.rpcapi import ConductorAPI
from steward.drivers.fake import FakeDriver
from tests.functional import conductor_fixtures as cf


class CountingFake(FakeDriver):
    calls = 0

    def discover(self):
        type(self).calls += 1
        return super().discover()


def test_discovery_interval_is_honoured(db, conf):
    conf.set_override('discovery_interval', 1, group='agent')
    conductor, _ = cf.stack(conf)
    CountingFake.calls = 0
    agent = AgentManager(conf, ConductorAPI(conductor), host='host-a',
                         drivers=[CountingFake(conf, 'host-a')])
    agent.start()
    time.sleep(2.5)
    agent.stop()
    # cycles at ~0 s, 1 s and 2 s: the interval is the configured one, not 60 s
    assert 2 <= CountingFake.calls <= 4


def test_upstream_driver_names_are_accepted(conf):
    assert [d.name for d in driver_loader.load(['fake_driver'], conf, 'h')] == ['fake']


def test_unknown_driver_is_a_clear_configuration_error(conf):
    with pytest.raises(exception.InvalidConfiguration, match="'nosuch'"):
        driver_loader.load(['nosuch'], conf, 'h')


def test_same_device_from_two_drivers_is_refused(db, conf):
    conductor, _ = cf.stack(conf)
    agent = AgentManager(conf, ConductorAPI(conductor), host='host-a',
                         drivers=[FakeDriver(conf, 'host-a'), CountingFake(conf, 'host-a')])
    with pytest.raises(exception.InvalidConfiguration, match='both fake and fake'):
        agent.discover()

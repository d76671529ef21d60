"""A device-lifecycle stack for conductor tests: the real conductor on the test
database and the real Placement, the API app at 2.6, and an agent (the real
AgentManager served over the real in-memory oslo.messaging transport) running a
small cleanable driver. The driver stands in for the NVMe driver, which is not what
these tests are about: it reports NVME devices (type, serial, subsystem NQN, PCI
address) and its cleanup succeeds, fails or blocks on demand.

    def test_x(life):                   # the fixture below
        st = life.start()               # conductor + agent (init_host, one discovery)
        dev = st.device()               # the API's view at 2.6
"""
import contextlib
import json
import threading
import uuid

from starlette import testclient
import pytest

from steward.common import rpc as steward_rpc
from steward.agent.manager import AgentManager
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.conf import CONF
from steward.drivers import base
from steward.drivers import objects
from steward.placement import client as placement_client
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.fixtures.stack import wait_for

V26 = {'OpenStack-API-Version': 'accelerator 2.6'}
RC = 'CUSTOM_NVME_8086_0A54'
# [conductor] agent_ping_timeout. A live agent answers the conductor's ping in
# milliseconds (<= 21 ms seen at load average 6 on 2 cores), but a busy machine can
# stall any thread for longer than a short timeout, and a live agent taken for dead
# leaves its released device allocated: the value only bounds a hang, as
# tests/fixtures/stack.py wait_for's 30 s does.
PING_TIMEOUT = 30.0
# While a test has no agent answering (LifeEnv.agent_unreachable) the ping can only
# time out: its timeout is then just the time each attempt costs.
NO_ANSWER_PING_TIMEOUT = 0.5


def nvme_device(host, address, serial='SN-1', nqn='nqn.2014-08.org.example:ctrl-1',
                driver='cleanable'):
    """What the NVMe driver reports for one controller (the keys report.py reads)."""
    domain, bus, rest = address.split(':')
    dev, function = rest.split('.')
    info = objects.pci_info(domain, bus, dev, function)
    return objects.DriverDevice(
        vendor='8086', model='0a54', type='NVME',
        controlpath_id=objects.DriverControlPathID('PCI', info),
        deployable_list=[objects.DriverDeployable(
            name=f'{host}_{address}', num_accelerators=1,
            attribute_list=[objects.DriverAttribute('rc', RC)],
            attach_handle_list=[objects.DriverAttachHandle('PCI', info)],
            driver_name=driver)],
        std_board_info=json.dumps({'pci_address': address, 'cleanup_action': 'test_erase',
                                   'cleanup': {}}, sort_keys=True),
        vendor_board_info=json.dumps({'serial': serial, 'subsysnqn': nqn, 'model': 'T',
                                      'firmware': '1'}, sort_keys=True),
        driver_name=driver)


class CleanableDriver(base.Driver):
    """Reports ``self.slots`` ({address: (serial, nqn)}); its cleanup succeeds, or
    fails with ``self.fail``, or first waits for ``self.release`` when ``hold``."""
    name = 'cleanable'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.slots = {'0000:0a:00.0': ('SN-1', 'nqn.2014-08.org.example:ctrl-1')}
        self.cleaned = []
        self.fail = None
        self.hold = False
        self.started = threading.Event()
        self.release = threading.Event()

    def discover(self):
        return [nvme_device(self.host, addr, serial, nqn)
                for addr, (serial, nqn) in sorted(self.slots.items())]

    def cleanup(self, device, job=None):
        self.started.set()
        job.progress('erase', 50.0, 'halfway')
        if self.hold:
            while not self.release.wait(0.05):
                job.check()
        if self.fail is not None:
            raise self.fail
        self.cleaned.append(device['uuid'])
        job.record.update(action='test_erase', assurance_level='test',
                          verification='passed')


class LifeStack:
    def __init__(self, conf, host, driver, database, transport, placement_url=None):
        self.conf, self.host, self.driver = conf, host, driver
        # Default: the process's shared Placement; a test that stops and starts
        # Placement gives the URL of one of its own.
        self.placement_url = placement_url or placement_fixture.get_placement().url
        self.placement = placement_client.PlacementClient.from_conf(
            endpoint=self.placement_url)
        self.transport = transport
        self.conductor = ConductorManager(cf.deps(database, transport, self.placement))
        self.conductor.init_host()
        self.api = testclient.TestClient(roots.api_app(LocalConductorAPI(self.conductor),
                                                       database),
                                         raise_server_exceptions=False)
        self.agent = self.rpc_server = None

    # -- the agent -----------------------------------------------------------------
    def start_agent(self, recover=True, discover=True):
        """The agent's RPC server, then (``recover``) its init_host with start-up
        recovery, then one discovery."""
        self.agent = AgentManager(self.conf, LocalConductorAPI(self.conductor), host=self.host,
                                  drivers=[self.driver])
        self.rpc_server = self.transport.start_server(CONF.rpc_topic_agent, self.host,
                                                   [self.agent])
        if recover:
            self.agent.init_host()
        if discover:
            self.discover()
        return self.agent

    def kill_agent(self):
        """A crash: running cleanups report nothing, nobody answers."""
        if self.agent is not None:
            self.agent.stop()
            steward_rpc.stop_server(self.rpc_server)
        self.agent = self.rpc_server = None

    def discover(self):
        """One discovery cycle of the agent's driver, through the conductor."""
        agent = self.agent or AgentManager(self.conf, LocalConductorAPI(self.conductor),
                                           host=self.host, drivers=[self.driver])
        self.conductor.reporter.forget(self.host)
        return agent.run_cycle()

    def stop(self):
        self.conductor.stop()
        self.kill_agent()
        self.api.close()

    # -- reading ---------------------------------------------------------------------
    def devices(self, headers=V26):
        r = self.api.get('/v2/devices', headers=headers)
        assert r.status_code == 200, r.text
        return r.json()['devices']

    def device(self, dev_uuid=None):
        devices = self.devices()
        if dev_uuid is None:
            assert len(devices) == 1, devices
            return devices[0]
        return next(d for d in devices if d['uuid'] == dev_uuid)

    def deployables(self, dev):
        deps = self.api.get('/v2/deployables').json()['deployables']
        return [d for d in deps if d['device_id'] == self._device_id(dev['uuid'])]

    def deployable(self, dev):
        deps = self.deployables(dev)
        assert len(deps) == 1, deps
        return deps[0]

    def _device_id(self, dev_uuid):
        from steward.db import devices as device_db
        with self.conductor.database.reader() as s:
            return device_db.device_get(s, dev_uuid).id

    def inventory(self, rp_uuid, rc=RC):
        with placement_fixture.admin_session(self.placement_url) as s:
            r = s.get(f'/resource_providers/{rp_uuid}/inventories')
            assert r.status_code == 200, r.text
            return r.json()['inventories'][rc]

    def providers(self):
        """{name: uuid} of the providers under this host's compute node."""
        with placement_fixture.admin_session(self.placement_url) as s:
            rps = s.get('/resource_providers').json()['resource_providers']
        return {rp['name']: rp['uuid'] for rp in rps if rp['name'].startswith(self.host)}

    def history(self, dev_uuid):
        r = self.api.get(f'/v2/devices/{dev_uuid}/history', headers=V26)
        assert r.status_code == 200, r.text
        return r.json()['history']

    def records(self, dev_uuid):
        r = self.api.get(f'/v2/devices/{dev_uuid}/erase_records', headers=V26)
        assert r.status_code == 200, r.text
        return r.json()['erase_records']

    def wait_state(self, dev_uuid, wanted, timeout=30):
        return wait_for(lambda: self.device(dev_uuid)['device_state'] in wanted and
                        self.device(dev_uuid), f'device {dev_uuid} in {wanted}', timeout)

    # -- tenants ---------------------------------------------------------------------
    def bind(self, dev, profile='life'):
        """Nova's allocation in Placement, then the bind; returns (instance, arq)."""
        dep = self.deployable(dev)
        names = [p['name'] for p in self.api.get('/v2/device_profiles')
                 .json()['device_profiles']]
        if profile not in names:
            r = self.api.post('/v2/device_profiles', json=[
                {'name': profile, 'groups': [{f'resources:{RC}': '1'}]}])
            assert r.status_code == 201, r.text
        inst = str(uuid.uuid4())
        arq = self.api.post('/v2/accelerator_requests',
                            json={'device_profile_name': profile}).json()['arqs'][0]['uuid']
        with placement_fixture.admin_session(self.placement_url) as s:
            r = s.put(f'/allocations/{inst}', json={
                'allocations': {dep['rp_uuid']: {'resources': {RC: 1}}},
                'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
                'consumer_type': 'INSTANCE'})
            assert r.status_code == 204, r.text
        r = self.api.patch('/v2/accelerator_requests', json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': self.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        assert r.status_code == 202, r.text
        return inst, arq

    def release(self, inst):
        """Nova deleting the instance: its allocation, then its ARQs."""
        with placement_fixture.admin_session(self.placement_url) as s:
            s.delete(f'/allocations/{inst}')
        r = self.api.delete(f'/v2/accelerator_requests?instance={inst}')
        assert r.status_code == 204, r.text


class AgentHost:
    """Another compute host on a LifeStack's conductor and transport: its own
    agent (an RPC server under its host name, so the conductor reaches it as it
    reaches any agent) running ``driver``, started and discovered once."""

    def __init__(self, st, conf, driver):
        self.name, self.driver = driver.host, driver
        self.agent = AgentManager(conf, LocalConductorAPI(st.conductor), host=self.name,
                                  drivers=[driver])
        self.server = st.transport.start_server(CONF.rpc_topic_agent, self.name,
                                                [self.agent])
        self.agent.init_host()
        st.conductor.reporter.forget(self.name)
        self.agent.run_cycle()

    def stop(self):
        self.agent.stop()
        steward_rpc.stop_server(self.server)


def second_host(st, conf):
    """An AgentHost with one NVMe stand-in device of its own (another serial)."""
    from tests.fixtures import placement_fixture as pf
    driver = CleanableDriver(conf, pf.unique_name('life-host-b'))
    driver.slots = {'0000:0b:00.0': ('SN-B', 'nqn.2014-08.org.example:ctrl-b')}
    return AgentHost(st, conf, driver)


class LifeEnv:
    def __init__(self, conf, database, transport):
        self.conf, self.database, self.transport = conf, database, transport
        self.host = placement_fixture.unique_name('life-host')
        self.driver = CleanableDriver(conf, self.host)
        conf.set_override('agent_ping_timeout', PING_TIMEOUT, group='conductor')
        self.stacks = []

    @contextlib.contextmanager
    def agent_unreachable(self):
        """For a test whose host has no agent (after kill_agent): the conductor's
        pings cannot be answered, so they give up quickly; start the agent again
        only after leaving the block."""
        self.conf.set_override('agent_ping_timeout', NO_ANSWER_PING_TIMEOUT,
                               group='conductor')
        try:
            yield
        finally:
            self.conf.set_override('agent_ping_timeout', PING_TIMEOUT, group='conductor')

    def start(self, agent=True, placement_url=None):
        st = LifeStack(self.conf, self.host, self.driver, self.database, self.transport,
                       placement_url)
        self.stacks.append(st)
        if agent:
            st.start_agent()
        return st

    def close(self):
        for st in self.stacks:
            st.stop()


@pytest.fixture
def life(database, transport, conf):
    # The API needs a parsed CONF for oslo.policy (tests/functional/api/conftest.py).
    CONF([], project='steward', default_config_files=[])
    env = LifeEnv(conf, database, transport)
    yield env
    env.close()

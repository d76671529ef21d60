"""The NVMe cleanup stack for functional tests: simulated controllers under the real
nvme-cli (tests/nvme_sim), the real conductor and the nvme agent talking over the real
oslo.messaging transport (in-process kombu), the real Placement, and the API app.

    def test_x(nvme):                   # the fixture below
        ctrl = nvme.sim.add_controller(...)
        st = nvme.start()               # conductor + agent (init_host, one discovery)
        dev = st.device()               # the API's view at 2.5
"""
import json
import threading
import time
import uuid

from starlette import testclient
import pytest

from steward.agent import rpcapi as agent_rpcapi
from steward.agent.manager import AgentManager
from steward.arqs import api as arq_api
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.conductor.rpcapi import ConductorAPI
from steward.conf import CONF
from steward.privsep import blockio
from steward.placement import client as placement_client
from steward.common import rpc as steward_rpc
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.fixtures.stack import free_port
from tests.functional import conductor_fixtures as cf
from tests.nvme_sim import Simulation

LATEST = {'OpenStack-API-Version': 'accelerator 2.5'}
RC = 'CUSTOM_NVME_8086_0A54'
TENANT = b'TENANT-SECRET-0123456789abcdef!' * 33       # 1023 bytes, easy to grep for
# [conductor] agent_ping_timeout while the agent runs: a live agent answers in
# milliseconds, but on a loaded machine the product's 2 s could expire and a test
# would see a live agent as gone. While it is down (kill_agent) the product's value
# applies: nobody answers, the ping waits it out, and a ping sent then is answered
# after a restart from the queue that survives it.
LIVE_AGENT_PING_TIMEOUT = 30


class Stack:
    """``api_runs_arqs``: the API is a standalone one's (the deployment's), over
    ``transport``: it runs the ARQ operations itself (Root.api_arqs, with
    ``[placement]`` read from a configuration file naming the test's Placement)
    and reaches the conductor, served on ``transport``, for everything else;
    otherwise it holds the conductor as steward serve's does."""

    def __init__(self, conf, sim, host, database, transport, agent_api=None,
                 api_runs_arqs=False, conf_dir=None):
        self.conf, self.sim, self.host = conf, sim, host
        server = placement_fixture.get_placement()
        self.placement_url = server.url
        self.placement = placement_client.PlacementClient.from_conf(endpoint=server.url)
        # One Metrics for the conductor and the API, as steward serve's root builds.
        root = roots.api_root(database)
        self.metrics = root.metrics
        self.metrics_server = None
        self.conductor = ConductorManager(cf.deps(database, transport, self.placement,
                                                  metrics=self.metrics,
                                                  agent_api=agent_api))
        self.transport = transport
        self.conductor.init_host()
        self.conductor_server = None
        if api_runs_arqs:
            self.conductor_server = transport.start_server(
                CONF.rpc_topic_conductor, 'nvme-conductor', [self.conductor])
            path = conf_dir / 'api.conf'
            path.write_text(f'[placement]\nauth_type = admin_token\ntoken = admin\n'
                            f'endpoint = {server.url}\nendpoint_override = {server.url}\n')
            CONF(['--config-file', str(path)], project='steward', default_config_files=[])
            conductor_api = ConductorAPI(transport=transport)
            arqs = root.api_arqs(conductor_api)
            assert arqs.local, 'the API would send its ARQ operations over RPC'
            self.app = root.api_app(conductor_api, arqs)
        else:
            self.app = root.api_app(LocalConductorAPI(self.conductor),
                                    arq_api.LocalArqAPI(self.conductor.arqs))
        self.api = testclient.TestClient(self.app, raise_server_exceptions=False)
        self.agent = self.rpc_server = None

    # -- the agent -----------------------------------------------------------------
    def start_agent(self, discover=True):
        self.conf.set_override('agent_ping_timeout', LIVE_AGENT_PING_TIMEOUT,
                               group='conductor')
        self.agent = AgentManager(self.conf, LocalConductorAPI(self.conductor), host=self.host)
        self.rpc_server = self.transport.start_server(CONF.rpc_topic_agent, self.host,
                                                   [self.agent])
        self.agent.init_host()
        if discover:
            self.agent.run_cycle()
        return self.agent

    def kill_agent(self, wait=True):
        """What a crash leaves: no outcome reported for running cleanups, no server."""
        if self.agent is not None:
            self.agent.stop()
        if self.rpc_server is not None:
            if wait:
                steward_rpc.stop_server(self.rpc_server)
            else:
                # The listener notices the stop at its next poll timeout (~1.4 s):
                # at the end of a test nobody needs to wait for that.
                self.rpc_server.stop()
                threading.Thread(target=self.rpc_server.wait, daemon=True).start()
        self.agent = self.rpc_server = None
        self.conf.clear_override('agent_ping_timeout', group='conductor')

    def metrics_url(self):
        """This stack's metrics on a listener of their own ([api] metrics_listen)."""
        if self.metrics_server is None:
            self.metrics_server = self.metrics.serve(f'127.0.0.1:{free_port()}')
        return self.metrics_server.url

    def stop(self):
        self.kill_agent(wait=False)
        self.api.close()
        if self.conductor_server is not None:
            steward_rpc.stop_server(self.conductor_server)
        self.conductor.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()

    def discover(self):
        self.conductor.reporter.forget(self.host)
        return self.agent.run_cycle()

    # -- reading ---------------------------------------------------------------------
    def devices(self):
        r = self.api.get('/v2/devices', headers=LATEST)
        assert r.status_code == 200, r.text
        return r.json()['devices']

    def device(self, address=None):
        for d in self.devices():
            if address is None or json.loads(d['std_board_info'])['pci_address'] == address:
                return d
        raise AssertionError(f'no device at {address}')

    def deployable(self, dev):
        deps = self.api.get('/v2/deployables').json()['deployables']
        return next(d for d in deps if d['name'] == f'{self.host}_'
                    f'{json.loads(dev["std_board_info"])["pci_address"]}')

    def inventory(self, rp_uuid, rc=RC):
        with placement_fixture.admin_session(self.placement_url) as s:
            return s.get(f'/resource_providers/{rp_uuid}/inventories').json()[
                'inventories'][rc]

    def traits(self, rp_uuid):
        with placement_fixture.admin_session(self.placement_url) as s:
            return set(s.get(f'/resource_providers/{rp_uuid}/traits').json()['traits'])

    def records(self, dev_uuid):
        r = self.api.get(f'/v2/devices/{dev_uuid}/erase_records', headers=LATEST)
        assert r.status_code == 200, r.text
        return r.json()['erase_records']

    def wait_state(self, dev_uuid, states, timeout=60):
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            state = self.api.get(f'/v2/devices/{dev_uuid}', headers=LATEST).json()[
                'device_state']
            if not seen or seen[-1] != state:
                seen.append(state)
            if state in states:
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f'device {dev_uuid} stuck; states seen {seen}')
            time.sleep(0.02)

    # -- tenants ---------------------------------------------------------------------
    def bind(self, dev, profile='nvme'):
        """Nova's part (allocation in Placement) then Cyborg's bind; returns the
        instance uuid. Raises AssertionError with the answers when refused."""
        dep = self.deployable(dev)
        if profile not in [p['name'] for p in self.api.get('/v2/device_profiles')
                           .json()['device_profiles']]:
            r = self.api.post('/v2/device_profiles', json=[
                {'name': profile, 'groups': [{f'resources:{RC}': '1'}]}])
            assert r.status_code == 201, r.text
        inst = str(uuid.uuid4())
        arq = self.api.post('/v2/accelerator_requests',
                            json={'device_profile_name': profile}).json()[
            'arqs'][0]['uuid']
        with placement_fixture.admin_session(self.placement_url) as s:
            alloc = s.put(f'/allocations/{inst}', json={
                'allocations': {dep['rp_uuid']: {'resources': {RC: 1}}},
                'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
                'consumer_type': 'INSTANCE'})
        r = self.api.patch('/v2/accelerator_requests', json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': self.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        return inst, arq, alloc, r

    def release(self, inst):
        """Nova deleting the instance: its allocation, then the ARQs."""
        with placement_fixture.admin_session(self.placement_url) as s:
            s.delete(f'/allocations/{inst}')
        r = self.api.delete(f'/v2/accelerator_requests?instance={inst}')
        assert r.status_code == 204, r.text

    def clean(self, dev_uuid, headers=LATEST):
        return self.api.post(f'/v2/devices/{dev_uuid}/clean', headers=headers)


class NvmeEnv:
    def __init__(self, tmp_path, conf, monkeypatch, database, transport):
        self.conf, self.database, self.transport = conf, database, transport
        self.tmp_path = tmp_path
        self.sim = Simulation(tmp_path / 'sim')
        # The driver runs [nvme] nvme_cli with the process environment: the shim rides
        # along exactly as LD_PRELOAD would on a test host.
        for key, value in self.sim.env.items():
            monkeypatch.setenv(key, value)
        conf.set_override('sysfs_root', self.sim.sysfs_root)
        conf.set_override('dev_root', self.sim.dev_root)
        conf.set_override('nvme_cli', self.sim.nvme_cli, group='nvme')
        conf.set_override('device_spec', ['{"vendor_id": "8086"}'], group='nvme')
        conf.set_override('enabled_drivers', ['nvme'], group='agent')
        conf.set_override('cleanup_timeout', 30, group='nvme')
        self.host = placement_fixture.unique_name('nvme-host')
        self.stacks = []

    def start(self, agent=True, agent_api=None, api_runs_arqs=False):
        st = Stack(self.conf, self.sim, self.host, self.database, self.transport,
                   agent_api=agent_api, api_runs_arqs=api_runs_arqs,
                   conf_dir=self.tmp_path)
        self.stacks.append(st)
        if agent:
            st.start_agent()
        return st

    def close(self):
        for st in self.stacks:
            st.stop()
        self.sim.close()


@pytest.fixture
def nvme(database, transport, conf, tmp_path, monkeypatch):
    # The API needs a parsed CONF for oslo.policy (tests/functional/api/conftest.py).
    CONF([], project='steward', default_config_files=[])
    env = NvmeEnv(tmp_path, conf, monkeypatch, database, transport)
    yield env
    env.close()


def tenant_bytes_anywhere(ctrl, needle=TENANT[:64]):
    """Where the tenant's pattern can still be read: every namespace (attached or
    not) and the unallocated capacity."""
    return ctrl.find_on_media(needle)


def blocks_anywhere(ctrl, digests, size=4096):
    """Where a 4 KiB block whose sha256 is one of ``digests`` (watermarks, as the
    privsep daemon reports them) appears at an aligned offset of any backing file."""
    wanted = set(digests)
    hits = []
    for path in ctrl.media_files():
        with open(path, 'rb') as f:
            off = 0
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                for i in range(0, len(chunk), size):
                    if blockio.digest(chunk[i:i + size]) in wanted:
                        hits.append((path, off + i))
                off += len(chunk)
    return hits


def agent_version_api(version, transport):
    """An AgentAPI pinned to ``version`` for every host ([upgrade_levels]-style)."""
    return agent_rpcapi.AgentAPI(transport, version_cap=version)

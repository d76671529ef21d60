"""Issue 7: kill -9 an agent in the middle of a secure cleanup and restart it.

A fourth agent host, dedicated to this module, runs the nvme driver over a simulated
controller (tests/nvme_sim) under the real nvme-cli, in its own ``steward agent``
process talking to the shared deployment over RabbitMQ. An instance is booted on the
NVMe device and deleted; while the controller's sanitize runs, the agent is killed
(SIGKILL to its process group; the sim's eraser is a detached process, as a drive
keeps erasing when its host dies) and started again. The device must come back in
error (an interrupted cleanup proves nothing), reserved in Placement and refused to
binds; after the sanitize finishes, POST /clean returns it to service with none of
the tenant's bytes readable.
"""
import time

import pytest

from tests.multihost import flows
from tests.nvme_sim import Simulation

pytestmark = pytest.mark.slow

HOST = 'mh-nvme'
ADDRESS = '0000:0a:00.0'
RC = 'CUSTOM_NVME_8086_0A54'
PROFILE = 'mh-nvme'
MiB = 2 ** 20
NS_SIZE = 64 * MiB
SANITIZE_SECONDS = 6
TENANT = b'MH-TENANT-SECRET-0123456789abcdef' * 31
OFFSETS = (0, 5 * MiB, NS_SIZE - 8192)
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}


@pytest.fixture(scope='module')
def nvme_host(cluster):
    sim = Simulation(cluster.base / 'nvme-sim')
    ctrl = sim.add_controller(address=ADDRESS, namespaces=[NS_SIZE], ces=True,
                              sanitize_seconds=SANITIZE_SECONDS)
    try:
        agent = cluster.add_nvme_agent(HOST, sim)
        cluster.wait_for(lambda: _deployable(cluster) is not None and _rp_in_tree(
            cluster), f'agent {HOST} registered', timeout=90)
        yield agent, ctrl
    finally:
        cluster.stop_extra_agent(HOST)
        sim.close()


def _deployable(cluster):
    return next((d for d in cluster.deployables(HOST) if d['name'] == f'{HOST}_{ADDRESS}'),
                None)


def _rp_in_tree(cluster):
    with cluster.placement_client() as p:
        tree = p.get('/resource_providers', params={
            'in_tree': cluster.compute_rps[HOST]}).json()['resource_providers']
    return _deployable(cluster)['rp_uuid'] in {rp['uuid'] for rp in tree}


def _device(api):
    r = api.get('/v2/devices', params={'hostname': HOST}, headers=V25)
    assert r.status_code == 200, r.text
    devices = r.json()['devices']
    assert len(devices) == 1, devices
    return devices[0]


def _state(api, dev_uuid):
    r = api.get(f'/v2/devices/{dev_uuid}', headers=V25)
    assert r.status_code == 200, r.text
    return r.json()['device_state']


def _wait_state(api, dev_uuid, wanted, timeout=60):
    """Polls until the device is in one of ``wanted``; returns the states seen."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        state = _state(api, dev_uuid)
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in wanted:
            return seen
        assert time.monotonic() < deadline, f'device stuck; states seen {seen}'
        time.sleep(0.05)


def _inventory(cluster, rp_uuid):
    with cluster.placement_client() as p:
        return p.get(f'/resource_providers/{rp_uuid}/inventories').json()[
            'inventories'][RC]


def _tenant_readable(ctrl):
    """Offsets anywhere in the namespace where the tenant's pattern still reads."""
    data, needle, hits = ctrl.read(0, NS_SIZE), TENANT[:64], []
    at = data.find(needle)
    while at >= 0:
        hits.append(at)
        at = data.find(needle, at + len(TENANT))
    return hits


def _assert_bind_refused(cluster, api, rp_uuid):
    """Placement has no capacity left, and Cyborg's bind guard refuses too."""
    instance = '11111111-2222-4333-8444-555555555555'
    with cluster.placement_client() as p:
        r = p.put(f'/allocations/{instance}', json={
            'allocations': {rp_uuid: {'resources': {RC: 1}}},
            'project_id': 'mh-project', 'user_id': 'mh-user',
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 409, r.text
    r = api.post('/v2/accelerator_requests', json={'device_profile_name': PROFILE})
    assert r.status_code == 201, r.text
    arqs = r.json()['arqs']
    try:
        r = api.patch('/v2/accelerator_requests',
                      json=flows.bind_body(arqs, HOST, rp_uuid, instance))
        assert r.status_code == 409, r.text
        assert r.json()['error_code'] == 'cyb.bind.device_not_available', r.text
    finally:
        for a in arqs:
            api.delete(f'/v2/accelerator_requests/{a["uuid"]}')


def test_agent_killed_mid_cleanup_and_restarted(healthy, nvme_host):
    cluster = healthy
    agent, ctrl = nvme_host
    rp = _deployable(cluster)['rp_uuid']
    for off in OFFSETS:
        ctrl.write(off, TENANT)
    assert _tenant_readable(ctrl)
    with cluster.api_client() as api:
        dev = _device(api)['uuid']
        assert _state(api, dev) == 'available'
        flows.ensure_profile(api, name=PROFILE, rc=RC)
        instance, arqs = flows.boot(cluster, api, HOST, rp, profile=PROFILE, rc=RC)
        assert [(a['state'], a['device_rp_uuid']) for a in arqs] == [('Bound', rp)]
        assert _state(api, dev) == 'allocated'

        flows.delete(cluster, api, instance)
        seen = _wait_state(api, dev, ('cleaning', 'available', 'error'))
        assert seen[-1] == 'cleaning', seen
        deadline = time.monotonic() + 20
        while not ctrl.sanitize_state()['in_progress']:
            assert time.monotonic() < deadline, ctrl.sanitize_state()
            time.sleep(0.02)

        agent.kill()
        assert not agent.alive()
        # Nobody reports an outcome: the device stays where the crash left it...
        assert _state(api, dev) == 'cleaning'
        # ...and the drive keeps erasing without its host.
        assert ctrl.sanitize_state()['in_progress']
        restart_at = agent.log_size()
        agent.start()
        seen = _wait_state(api, dev, ('available', 'error'))
        assert seen[-1] == 'error', seen
        log = agent.log_since(restart_at)
        assert 'Traceback' not in log, log[-4000:]

        inv = _inventory(cluster, rp)
        assert inv['reserved'] == inv['total'] == 1, inv
        _assert_bind_refused(cluster, api, rp)
        r = api.get(f'/v2/devices/{dev}/erase_records', headers=V25)
        assert r.status_code == 200, r.text
        rec = r.json()['erase_records'][0]
        assert rec['status'] == 'interrupted', rec
        assert rec['error_code'] == 'cyb.cleanup.interrupted', rec
        assert rec['assurance_level'] == 'none', rec

        done = ctrl.wait_sanitize(timeout=SANITIZE_SECONDS * 5)
        assert done['status'] == 'success', done
        r = api.post(f'/v2/devices/{dev}/clean', headers=V25)
        assert r.status_code == 202, r.text
        seen = _wait_state(api, dev, ('available', 'error'), timeout=90)
        assert seen[-1] == 'available', (seen, api.get(
            f'/v2/devices/{dev}/erase_records', headers=V25).json())
        assert flows.wait_equal(lambda: _inventory(cluster, rp)['reserved'], 0) == 0
        assert _tenant_readable(ctrl) == []
    assert flows.transient(cluster) == ([], [])

"""Pools of identical PCI functions (issue 52): the pci driver over a fake sysfs
tree of eight 10de:2330 functions on vfio-pci, the real conductor, the ARQ API and
a real Placement (openstack-placement).

A ``[pci] device_spec`` entry tagged ``pool: true`` makes the functions of one
NUMA node ONE provider whose total is their number: a group of eight is one
candidate where eight one-unit providers gave none, the bind gives each ARQ of
the group its own function, and the pool's ``reserved`` counts its functions out
of service.
"""
import concurrent.futures
import json
import uuid

import pytest
from starlette import testclient

from steward.conductor.local_api import LocalConductorAPI
from steward.drivers.pci.driver import PciDriver
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.fixtures.sysfs_tree import gpu_address
from tests.fixtures.sysfs_tree import make_gpu_server
from tests.fixtures.sysfs_tree import write_aer
from tests.functional import conductor_fixtures as cf

URL = '/v2/accelerator_requests'
RC = 'PGPU'
V29 = {'OpenStack-API-Version': 'accelerator 2.9'}
POOLED = {'vendor_id': '10de', 'product_id': '2330', 'resource_class': 'PGPU',
          'pool': True}

pytestmark = pytest.mark.usefixtures('parsed_conf')


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


@pytest.fixture
def host():
    return placement_fixture.unique_name('gpu')


def _start(conf, database, transport, placement, host, root, *entries):
    conf.set_override('sysfs_root', str(root))
    conf.set_override('device_spec', [json.dumps(e) for e in entries], group='pci')
    return cf.stack(database, transport, conf, placement[0], host=host,
                    drivers=[PciDriver(conf, host)])


def _get(server, path, version='1.39'):
    with placement_fixture.admin_session(server.url) as s:
        r = s.get(path, headers={'OpenStack-API-Version': f'placement {version}'})
        assert r.status_code == 200, r.text
        return r.json()


def _root(server, host):
    return _get(server, f'/resource_providers?name={host}')['resource_providers'][0]


def _device_providers(server, host):
    root = _root(server, host)
    return {rp['name']: rp for rp in _get(
        server, f'/resource_providers?in_tree={root["uuid"]}')['resource_providers']
        if rp['uuid'] != root['uuid']}


def _inventory(server, rp_uuid):
    return _get(server, f'/resource_providers/{rp_uuid}/inventories')['inventories'][RC]


def _candidates(server, host, groups, policy='none'):
    """GET /allocation_candidates as Nova 34 asks for a device profile's groups,
    on ``host`` only (``in_tree``: the Placement server is shared by the tests)."""
    query = [('limit', '1000'), ('group_policy', policy)]
    root = _root(server, host)['uuid']
    for i, n in enumerate(groups):
        query += [(f'resources_DEVICE_PROFILE_{i}', f'{RC}:{n}'),
                  (f'required_DEVICE_PROFILE_{i}', 'OWNER_CYBORG'),
                  (f'in_tree_DEVICE_PROFILE_{i}', root)]
    with placement_fixture.admin_session(server.url) as s:
        r = s.get('/allocation_candidates', params=query,
                  headers={'OpenStack-API-Version': 'placement 1.39'})
        assert r.status_code == 200, r.text
        return r.json()['allocation_requests']


def _claim(server, instance, rp_uuid, units):
    """Nova's allocation, made before it binds the ARQs."""
    with placement_fixture.admin_session(server.url) as s:
        r = s.put(f'/allocations/{instance}', json={
            'allocations': {rp_uuid: {'resources': {RC: units}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'},
            headers={'OpenStack-API-Version': 'placement 1.39'})
        return r.status_code


def _bind_body(arqs, host, rp_uuid, instance):
    return {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': host},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
            for a in arqs}


def _pci(info):
    return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_eight_functions_in_one_group_bind_eight_distinct_functions(
        transport, database, db, conf, placement, host, tmp_path):
    _, server = placement
    root = make_gpu_server(tmp_path / 'sys', [0] * 8)
    conductor, _ = _start(conf, database, transport, placement, host, root, POOLED)

    (name, pool), = _device_providers(server, host).items()
    assert name.startswith(f'{host}_{RC}_numa0_')
    inv = _inventory(server, pool['uuid'])
    assert (inv['total'], inv['max_unit'], inv['reserved']) == (8, 8, 0)
    # The request clouds make for a whole server: one group of eight. One
    # provider per function answered none (issue 52).
    (cand,) = _candidates(server, host, [8])
    assert cand['allocations'] == {pool['uuid']: {'resources': {RC: 8}}}
    assert _candidates(server, host, [4, 4]) and _candidates(server, host, [1] * 8)

    with testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                               raise_server_exceptions=False) as api:
        assert api.post('/v2/device_profiles', json=[{'name': 'x8', 'groups': [
            {f'resources:{RC}': '8'}]}]).status_code == 201
        assert api.post('/v2/device_profiles', json=[{'name': 'x1', 'groups': [
            {f'resources:{RC}': '1'}]}]).status_code == 201
        arqs = api.post(URL, json={'device_profile_name': 'x8'}).json()['arqs']
        assert len(arqs) == 8
        first = str(uuid.uuid4())
        assert _claim(server, first, pool['uuid'], 8) == 204
        r = api.patch(URL, json=_bind_body(arqs, host, pool['uuid'], first))
        assert r.status_code == 202, r.text
        bound = api.get(URL, params={'instance': first}, headers=V29).json()['arqs']
        assert {a['state'] for a in bound} == {'Bound'}
        addresses = {_pci(a['attach_handle_info']) for a in bound}
        assert addresses == {gpu_address(i) for i in range(8)}
        assert {a['attach_handle_info']['numa_node'] for a in bound} == {0}
        assert {a['device_rp_uuid'] for a in bound} == {pool['uuid']}

        # The pool is full: Placement offers nothing more, and a bind that
        # Placement's count would have let through (a lost allocation) finds no
        # function and changes nothing.
        assert _candidates(server, host, [1]) == []
        late = api.post(URL, json={'device_profile_name': 'x1'}).json()['arqs']
        r = api.patch(URL, json=_bind_body(late, host, pool['uuid'], str(uuid.uuid4())))
        assert r.status_code == 409 and r.json()['error_code'] == 'cyb.bind.pool_exhausted'
        assert api.get(f"{URL}/{late[0]['uuid']}").json()['state'] == 'Initial'

        devices = api.get('/v2/devices', headers=V29).json()['devices']
        assert {d['numa_node'] for d in devices} == {0}
        assert {d['device_state'] for d in devices} == {'allocated'}
        # Nova's allocations count the functions in use: none is reserved.
        assert _inventory(server, pool['uuid'])['reserved'] == 0

        assert api.delete(URL, params={'instance': first}).status_code == 204
        devices = api.get('/v2/devices', headers=V29).json()['devices']
        assert {d['device_state'] for d in devices} == {'available'}


@pytest.mark.parametrize('db', ['sqlite'], indirect=True)
def test_pools_never_span_numa_nodes_and_reserve_what_is_out_of_service(
        transport, database, db, conf, placement, host, tmp_path):
    _, server = placement
    root = make_gpu_server(tmp_path / 'sys', [0, 0, 0, 0, 1, 1, 1, 1])
    conductor, agent = _start(conf, database, transport, placement, host, root, POOLED)
    pools = _device_providers(server, host)
    by_node = {n: rp for n in (0, 1) for name, rp in pools.items() if f'_numa{n}_' in name}
    assert len(pools) == 2 and len(by_node) == 2
    for rp in by_node.values():
        inv = _inventory(server, rp['uuid'])
        assert (inv['total'], inv['max_unit'], inv['reserved']) == (4, 4, 0)
    # Four on one NUMA node: one group of four, from either pool; eight
    # anywhere on the host: two groups of four (group_policy none).
    assert len(_candidates(server, host, [4])) == 2
    assert _candidates(server, host, [8]) == []
    assert {tuple(sorted(c['allocations'])) for c in _candidates(server, host, [4, 4])} >= {
        tuple(sorted(rp['uuid'] for rp in by_node.values()))}

    with testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                               raise_server_exceptions=False) as api:
        devices = api.get('/v2/devices', headers=V29).json()['devices']
        on_one = sorted((d for d in devices if d['numa_node'] == 1),
                        key=lambda d: json.loads(d['std_board_info'])['address'])
        assert len(on_one) == 4
        # One function disabled: one unit out of its pool, none of the other.
        r = api.post(f"/v2/devices/{on_one[0]['uuid']}/disable")
        assert r.status_code == 200, r.text
        assert _inventory(server, by_node[1]['uuid'])['reserved'] == 1
        assert _inventory(server, by_node[0]['uuid'])['reserved'] == 0
        # Below 2.9 the key is absent.
        assert 'numa_node' not in api.get('/v2/devices').json()['devices'][0]

    # One failing GPU takes one unit out: a fatal AER error on a function of
    # node 0 (the kernel's counters in sysfs) read at the next discovery.
    failing = root / 'devices' / 'pci0000:00' / gpu_address(1)
    write_aer(failing, fatal={'Completion Timeout': 1})
    agent.run_cycle()
    assert _inventory(server, by_node[0]['uuid'])['reserved'] == 1
    assert _inventory(server, by_node[1]['uuid'])['reserved'] == 1
    assert _candidates(server, host, [4]) == []
    assert len(_candidates(server, host, [3])) == 2


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_concurrent_binds_into_one_pool_never_hand_a_function_twice(
        transport, database, db, conf, placement, host, tmp_path):
    """64 binds of one ARQ each into a pool of 8, 16 at a time: 8 Bound, each on
    its own function; every other answers 409 and changes nothing."""
    _, server = placement
    root = make_gpu_server(tmp_path / 'sys', [0] * 8)
    conductor, _ = _start(conf, database, transport, placement, host, root, POOLED)
    (pool,) = _device_providers(server, host).values()
    cf.make_profile(database, 'x1', [{f'resources:{RC}': '1'}])
    arqs = [conductor.arq_create(cf.admin(), 'x1', 'p')[0] for _ in range(64)]

    def bind(arq):
        try:
            return conductor.arq_bind(cf.admin(), [{
                'uuid': arq['uuid'], 'hostname': host, 'device_rp_uuid': pool['uuid'],
                'instance_uuid': str(uuid.uuid4())}])[0]
        except Exception as err:  # noqa: BLE001 - the refusals are counted below
            return err

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(bind, arqs))
    bound = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if not isinstance(r, dict)]
    assert len(bound) == 8, refused[:3]
    assert {getattr(r, 'code', None) for r in refused} <= {
        'cyb.bind.pool_exhausted'}, refused[:3]
    assert len({_pci(r['attach_handle_info']) for r in bound}) == 8


def _provider_allocations(server, rp_uuid):
    return {c: a['resources'] for c, a in _get(
        server, f'/resource_providers/{rp_uuid}/allocations')['allocations'].items()}


@pytest.mark.parametrize('db', ['sqlite', 'postgresql'], indirect=True)
def test_a_running_host_moves_onto_a_pool_with_its_instances(
        transport, database, db, conf, placement, host, tmp_path):
    """Issue 52, item 5: an entry of a host with bound functions is tagged pool
    and the agent restarted. The free functions move at its next report; the
    bound ones move with their instances' allocations in one POST /reshaper:
    the instances keep their functions, Placement's usage stays theirs, the
    per-function providers are gone."""
    from steward.agent.manager import AgentManager
    _, server = placement
    root = make_gpu_server(tmp_path / 'sys', [0] * 4)
    plain = dict(POOLED, pool=False)
    conductor, _ = _start(conf, database, transport, placement, host, root, plain)
    singles = {name.rsplit('_', 1)[1]: rp for name, rp in
               _device_providers(server, host).items()}
    assert sorted(singles) == [gpu_address(i) for i in range(4)]
    cf.make_profile(database, 'x1', [{f'resources:{RC}': '1'}])
    instances, handles = {}, {}
    for i in (0, 1):
        rp = singles[gpu_address(i)]['uuid']
        inst = instances[i] = str(uuid.uuid4())
        assert _claim(server, inst, rp, 1) == 204
        arq = conductor.arq_create(cf.admin(), 'x1', 'p')[0]
        (bound,) = conductor.arq_bind(cf.admin(), [{
            'uuid': arq['uuid'], 'hostname': host, 'device_rp_uuid': rp,
            'instance_uuid': inst}])
        handles[i] = bound['attach_handle_uuid']

    conf.set_override('device_spec', [json.dumps(POOLED)], group='pci')
    again = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                         drivers=[PciDriver(conf, host)])
    again.init_host()
    again.run_cycle()

    (pool,) = _device_providers(server, host).values()
    inv = _inventory(server, pool['uuid'])
    assert (inv['total'], inv['max_unit'], inv['reserved']) == (4, 4, 0)
    assert _provider_allocations(server, pool['uuid']) == {
        instances[i]: {RC: 1} for i in (0, 1)}
    for i in (0, 1):
        with placement_fixture.admin_session(server.url) as s:
            doc = s.get(f'/allocations/{instances[i]}').json()['allocations']
        assert doc == {pool['uuid']: {'resources': {RC: 1}, 'generation': doc[
            pool['uuid']]['generation']}}
    # Each instance keeps its function: the same handle, now on the pool.
    with testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                               raise_server_exceptions=False) as api:
        for i in (0, 1):
            (arq,) = api.get(URL, params={'instance': instances[i]}).json()['arqs']
            assert arq['state'] == 'Bound' and arq['attach_handle_uuid'] == handles[i]
            assert _pci(arq['attach_handle_info']) == gpu_address(i)
            assert arq['device_rp_uuid'] == pool['uuid']
        # Two units left; a group of two lands on the pool and takes the others.
        assert len(_candidates(server, host, [2])) == 1 and _candidates(server, host, [3]) == []
        assert api.delete(URL, params={'instance': instances[0]}).status_code == 204
    assert len(_candidates(server, host, [2])) == 1
    # Quiet from now on: the next report changes nothing.
    again.run_cycle()
    assert len(_device_providers(server, host)) == 1

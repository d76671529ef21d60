"""First reports of hosts Steward has no row of, written together
(steward/conductor/report/first.py), against the real Placement: the rows and
providers are those the usual diff writes, a host Placement already knows goes
the usual way, and the next cycles are quiet."""
import concurrent.futures
import uuid

import pytest

from steward.agent.manager import AgentManager
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.db import attributes as attribute_db
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.drivers import fake
from steward.placement import provider_sync
from tests.fixtures import placement_fixture
from tests.functional import conductor_fixtures as cf

HOSTS = 6


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


def _state(server, rp_uuid):
    with placement_fixture.admin_session(server.url) as s:
        rp = s.get(f'/resource_providers/{rp_uuid}').json()
        inv = s.get(f'/resource_providers/{rp_uuid}/inventories').json()['inventories']
        traits = s.get(f'/resource_providers/{rp_uuid}/traits').json()['traits']
    return rp, inv, set(traits)


def _rows(database, host):
    """What the database holds of ``host``: comparable across hosts."""
    with database.reader() as s:
        devices = device_db.device_list(s, {'hostname': host})
        out = []
        for device in devices:
            deps = deployable_db.deployable_list(s, {'device_id': device.id})
            attrs = attribute_db.attributes_by_deployable(s, [d.id for d in deps])
            out.append({
                'device': (device.type, device.vendor, device.model, device.device_state,
                           device.status, device.std_board_info),
                'deployables': sorted(
                    (d.name.replace(host, 'HOST'), d.num_accelerators, d.driver_name,
                     d.rp_uuid, tuple(sorted((a.key, a.value) for a in attrs[d.id])))
                    for d in deps)})
    return out


def test_first_reports_together_write_what_the_usual_way_writes(
        transport, database, db, conf, placement):
    client, server = placement
    conductor = ConductorManager(cf.deps(database, transport, client))
    conductor.init_host()
    api = LocalConductorAPI(conductor)
    tag = uuid.uuid4().hex[:8]
    hosts = [f'first-{tag}-{i}' for i in range(HOSTS)]
    agents = [AgentManager(conf, api, host=h, drivers=[fake.FakeDriver(conf, h)])
              for h in hosts]
    before = dict(client.stats)
    with concurrent.futures.ThreadPoolExecutor(HOSTS) as pool:
        results = list(pool.map(lambda a: a.run_cycle(), agents))
    assert all(r['changed'] and 'error' not in r for r in results), results
    # A host with no row: its compute node created without a lookup, no provider
    # read before it is created, no tree listed after the reshape.
    assert client.stats['reads'] == before['reads']

    # What ReportDiff and PlacementSync write for the fake driver's device.
    for host in hosts:
        rows = _rows(database, host)
        assert len(rows) == 1
        (dev,) = rows
        assert dev['device'][:5] == ('FPGA', '0xABCD', 'miss model info', 'available',
                                     'enabled')
        (dep,) = dev['deployables']
        assert dep[:3] == ('HOST_FakeDevice', 16, 'fake')
        assert dep[4] == (('rc', 'FPGA'), ('trait0', 'CUSTOM_FAKE_DEVICE'))
        rp, inv, traits = _state(server, dep[3])
        assert rp['name'] == f'{host}_FakeDevice'
        root = client.find_provider_by_name(host)
        assert rp['parent_provider_uuid'] == root['uuid'] == \
            str(uuid.uuid5(uuid.NAMESPACE_DNS, host))
        assert traits == {'CUSTOM_FAKE_DEVICE', provider_sync.OWNER_TRAIT}
        assert inv['FPGA']['total'] == 16 and inv['FPGA']['reserved'] == 0
        # The generation the client counted after the reshape is Placement's.
        assert client.remembered_inventory(dep[3], rp['generation']) == inv
        with database.reader() as s:
            (device,) = device_db.device_list(s, {'hostname': host})
            assert device_db.device_handles_in_use(s, device.id) == 0
            # The fake driver's ok reading, written with the row as
            # health_ops.apply stores it.
            assert (device.health, device.health_conditions, device.health_fault) == \
                ('ok', '[]', None)
            assert device.health_read_at is not None

    # Quiet next cycle: no request at all; after a restart of the conductor (no
    # memory of anything), reads only.
    quiet = dict(client.stats)
    assert [cf.summary(a.run_cycle()) for a in agents] == \
        [{'changed': False, 'placement_writes': 0}] * HOSTS
    assert client.stats == quiet
    restarted = ConductorManager(cf.deps(database, transport, client))
    client.forget()
    for agent in agents:
        agent.conductor = LocalConductorAPI(restarted)
        assert agent.run_cycle()['placement_writes'] == 0
    assert client.stats['writes'] == quiet['writes']


def test_a_compute_node_nova_registered_is_found_and_its_tree_listed(
        transport, database, db, conf, placement):
    """Nova registered the compute node first (another uuid than Steward's): the
    batch's POST is answered 409, the compute node is found by name and its tree
    listed (for devices Nova hands out: tests/functional/test_pci_driver.py), and
    the device hangs under Nova's provider."""
    client, server = placement
    host = placement_fixture.unique_name('novahost')
    nova_uuid = str(uuid.uuid4())
    with placement_fixture.admin_session(server.url) as s:
        assert s.post('/resource_providers',
                      json={'name': host, 'uuid': nova_uuid}).status_code == 200
    before = dict(client.stats)
    conductor, agent = cf.stack(database, transport, conf, client, host=host)
    # The refused POST, the custom trait (new to this client), the device
    # provider, its traits, its inventory (one provider: a PUT, no reshape); the
    # compute node by name and its tree.
    assert (client.stats['writes'] - before['writes'],
            client.stats['reads'] - before['reads']) == (5, 2)
    dep = cf.deployable(database, name_like=host)
    rp, inv, _ = _state(server, dep.rp_uuid)
    assert rp['parent_provider_uuid'] == nova_uuid
    assert inv['FPGA']['total'] == 16
    assert cf.summary(agent.run_cycle()) == {'changed': False, 'placement_writes': 0}


def test_a_burst_beside_nova_lists_every_tree_once(
        transport, database, db, conf, placement, monkeypatch):
    """Many first reports beside Nova (report/trees.py): one listing of every
    provider answers for their compute nodes and trees, instead of two reads a
    host; a device Nova hands out is still left out (tests/functional/
    test_pci_driver.py), and a compute node registered after the listing is
    looked up alone."""
    from steward.conductor.report import trees
    client, server = placement
    conf.set_override('create_compute_node', False, group='placement')
    conductor = ConductorManager(cf.deps(database, transport, client))
    conductor.init_host()
    # The first batch lists, however few hosts it holds (the rule of when a listing
    # pays: tests/unit/test_report_trees.py); the listing stays fresh for the whole
    # test, however slow the machine.
    monkeypatch.setattr(trees, 'MIN_HOSTS', 1)
    conductor.reporter.first.trees = trees.Trees(client, clock=lambda: 0.0)
    api = LocalConductorAPI(conductor)
    tag = uuid.uuid4().hex[:8]
    hosts = [f'burst-{tag}-{i}' for i in range(HOSTS)]
    roots = {h: str(uuid.uuid4()) for h in hosts}
    nova_owner = hosts[0]
    with placement_fixture.admin_session(server.url) as s:
        for host in hosts:
            assert s.post('/resource_providers', json={
                'name': host, 'uuid': roots[host]}).status_code == 200
        # Nova's PCI in Placement offers the fake device's address on this host.
        assert s.post('/resource_providers', json={
            'name': f'{nova_owner}_0000:0C:00.0', 'uuid': str(uuid.uuid4()),
            'parent_provider_uuid': roots[nova_owner]}).status_code == 200
    agents = [AgentManager(conf, api, host=h, drivers=[fake.FakeDriver(conf, h)])
              for h in hosts]
    before = dict(client.stats)
    with concurrent.futures.ThreadPoolExecutor(len(hosts)) as pool:
        results = list(pool.map(lambda a: a.run_cycle(), agents))
    assert all(r['changed'] and 'error' not in r for r in results), results
    # The listing, and the traits of the provider named as Nova names one.
    assert client.stats['reads'] - before['reads'] == 2

    for host in hosts[1:]:
        dep = cf.deployable(database, name_like=host)
        rp, inv, traits = _state(server, dep.rp_uuid)
        assert rp['parent_provider_uuid'] == roots[host]
        assert inv['FPGA']['total'] == 16
        assert provider_sync.OWNER_TRAIT in traits
    with database.reader() as s:
        assert device_db.device_list(s, {'hostname': nova_owner}) == []

    # Nova registers a compute node after the listing: looked up alone.
    late = f'burst-{tag}-late'
    late_root = str(uuid.uuid4())
    with placement_fixture.admin_session(server.url) as s:
        assert s.post('/resource_providers', json={
            'name': late, 'uuid': late_root}).status_code == 200
    before = dict(client.stats)
    agent = AgentManager(conf, api, host=late, drivers=[fake.FakeDriver(conf, late)])
    assert 'error' not in agent.run_cycle()
    assert client.stats['reads'] - before['reads'] == 2        # by name, its tree
    rp, _, _ = _state(server, cf.deployable(database, name_like=late).rp_uuid)
    assert rp['parent_provider_uuid'] == late_root

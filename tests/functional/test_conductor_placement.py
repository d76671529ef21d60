"""Conductor <-> real Placement: reservations that mirror device_state, the
compute-node provider, quiet discovery cycles, and a provider another
conductor deleted created again by a conductor that still remembered it."""
import uuid

import pytest

from steward.agent.manager import AgentManager
from steward.common import exception
from steward.common import states
from steward.conductor.local_api import LocalConductorAPI
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.drivers import base
from steward.drivers import objects
from tests.fixtures import placement_fixture
from tests.functional import conductor_fixtures as cf


class OneFunctionDriver(base.Driver):
    """A device with a single accelerator (a PCI function): the case where a bind
    reserves the whole provider."""
    name = 'onefn'

    def discover(self):
        return [_one_function(objects.pci_info('0000', '0a', '00', '1'), 'one',
                              f'{self.host}_0000:0a:00.1', 'CUSTOM_PCI_8086_0001',
                              'CUSTOM_ONE', 'onefn')]


def _one_function(info, model, name, rc, trait, driver):
    """A GPU device of one PCI function (``info``), one accelerator of ``rc``
    with ``trait``."""
    return objects.DriverDevice(
        vendor='0x8086', model=model, type='GPU',
        controlpath_id=objects.DriverControlPathID('PCI', info),
        deployable_list=[objects.DriverDeployable(
            name=name, num_accelerators=1,
            attribute_list=[objects.DriverAttribute('rc', rc),
                            objects.DriverAttribute('trait0', trait)],
            attach_handle_list=[objects.DriverAttachHandle('PCI', info)],
            driver_name=driver)])


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


def _inventory(server, rp_uuid):
    with placement_fixture.admin_session(server.url) as s:
        return s.get(f'/resource_providers/{rp_uuid}/inventories').json()['inventories']



def test_single_accelerator_device_is_reserved_while_bound(transport, database, db, conf, placement):
    client, server = placement
    host = placement_fixture.unique_name('host')
    conductor, _ = cf.stack(database, transport, conf, client, host=host, drivers=[OneFunctionDriver(conf, host)])
    cf.make_profile(database, 'one', [{'resources:CUSTOM_PCI_8086_0001': '1'}])
    dep = cf.deployable(database)
    rc = 'CUSTOM_PCI_8086_0001'
    assert _inventory(server, dep.rp_uuid)[rc]['reserved'] == 0
    inst = str(uuid.uuid4())
    placement_fixture.allocate(server.url, inst, dep.rp_uuid, rc)            # Nova's claim comes first
    arq = conductor.arq_create(cf.admin(), 'one', 'p')[0]
    conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': host,
                                     'device_rp_uuid': dep.rp_uuid, 'instance_uuid': inst}])
    assert _inventory(server, dep.rp_uuid)[rc]['reserved'] == 1
    with database.reader() as s:
        assert device_db.device_list(s)[0].device_state == states.DEV_ALLOCATED
    # The bind guard: the one accelerator is taken.
    other = conductor.arq_create(cf.admin(), 'one', 'p')[0]
    with pytest.raises(exception.DeviceNotAvailable):
        conductor.arq_bind(cf.admin(), [{'uuid': other['uuid'], 'hostname': host,
                                         'device_rp_uuid': dep.rp_uuid,
                                         'instance_uuid': str(uuid.uuid4())}])
    conductor.arq_delete(cf.admin(), instance_uuid=inst)
    assert _inventory(server, dep.rp_uuid)[rc]['reserved'] == 0
    with database.reader() as s:
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE


def test_disable_reserves_and_enable_frees(transport, database, db, conf, placement):
    client, server = placement
    host = placement_fixture.unique_name('host')
    conductor, _ = cf.stack(database, transport, conf, client, host=host)
    dep = cf.deployable(database)
    with database.reader() as s:
        device_uuid = device_db.device_list(s)[0].uuid
    conductor.device_set_status(cf.admin(), device_uuid, 'maintaining')
    assert _inventory(server, dep.rp_uuid)['FPGA']['reserved'] == 16
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    with pytest.raises(exception.DeviceMaintaining):
        conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': host,
                                            'device_rp_uuid': dep.rp_uuid,
                                            'instance_uuid': str(uuid.uuid4())}])
    conductor.device_set_status(cf.admin(), device_uuid, 'enabled')
    assert _inventory(server, dep.rp_uuid)['FPGA']['reserved'] == 0


def test_multi_accelerator_bind_leaves_reserved_alone(transport, database, db, conf, placement):
    client, server = placement
    host = placement_fixture.unique_name('host')
    conductor, _ = cf.stack(database, transport, conf, client, host=host)
    cf.make_profile(database)
    dep = cf.deployable(database)
    writes = client.stats['writes']
    arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': host,
                                     'device_rp_uuid': dep.rp_uuid,
                                     'instance_uuid': str(uuid.uuid4())}])
    assert client.stats['writes'] == writes
    assert _inventory(server, dep.rp_uuid)['FPGA']['reserved'] == 0


def test_quiet_cycle_makes_no_placement_request(transport, database, db, conf, placement):
    client, _ = placement
    host = placement_fixture.unique_name('host')
    conductor, agent = cf.stack(database, transport, conf, client, host=host)
    before = dict(client.stats)
    assert cf.summary(agent.run_cycle()) == {'changed': False, 'placement_writes': 0}
    assert client.stats == before
    # A restarted conductor (cold caches) reads but writes nothing.
    conductor.reporter.forget()
    client.forget()
    result = agent.run_cycle()
    assert result['placement_writes'] == 0 and client.stats['writes'] == before['writes']


def test_missing_compute_node_is_reported_not_fatal(transport, database, db, conf, placement):
    client, server = placement
    conf.set_override('create_compute_node', False, group='placement')
    host = placement_fixture.unique_name('host')
    conductor, agent = cf.stack(database, transport, conf, client, host=host)   # no exception
    with database.reader() as s:
        assert len(deployable_db.deployable_list(s)) == 1          # persisted anyway
    assert client.find_provider_by_name(f'{host}_FakeDevice') is None
    client.ensure_compute_node(host, create=True)           # nova-compute shows up
    conductor.reporter.placement_sync._compute_nodes.clear()
    assert agent.run_cycle()['changed'] is True              # retried, not skipped
    assert client.find_provider_by_name(f'{host}_FakeDevice') is not None


def test_inventory_change_reaches_placement(transport, database, db, conf, placement):
    client, server = placement
    host = placement_fixture.unique_name('host')
    driver = OneFunctionDriver(conf, host)
    conductor, agent = cf.stack(database, transport, conf, client, host=host, drivers=[driver])
    dep = cf.deployable(database)
    original = driver.discover

    def more_traits():
        devs = original()
        devs[0].deployable_list[0].attribute_list.append(
            objects.DriverAttribute('trait1', 'CUSTOM_TWO'))
        return devs
    driver.discover = more_traits
    # PUT /traits/CUSTOM_TWO (new custom trait) + PUT of the provider's traits.
    assert agent.run_cycle()['placement_writes'] == 2
    assert {'CUSTOM_ONE', 'CUSTOM_TWO', 'OWNER_CYBORG'} <= client.get_traits(dep.rp_uuid)


def test_missing_compute_node_error_reaches_the_agent(transport, database, db, conf, placement, caplog):
    client, _ = placement
    conf.set_override('create_compute_node', False, group='placement')
    host = placement_fixture.unique_name('host')
    with caplog.at_level('ERROR'):
        _, agent = cf.stack(database, transport, conf, client, host=host)
        result = agent.run_cycle()
    assert result['error']['code'] == 'cyb.placement.compute_node_missing'
    assert host in result['error']['message']
    assert 'resource_provider_name' in result['error']['message']
    assert any("could not register this host's devices" in r.getMessage()
               for r in caplog.records)


class ManyTypesDriver(base.Driver):
    """An mdev-like parent: one device, one deployable (provider) per type."""
    name = 'manytypes'
    types = 6

    def __init__(self, conf, host, excluded=False):
        super().__init__(conf, host)
        self.excluded = excluded

    def discover(self):
        info = objects.pci_info('0000', '0b', '00', '0')
        board = '{"cleanup": {"excluded": "no way to clean it"}}' if self.excluded else '{}'
        return [objects.DriverDevice(
            vendor='0x10de', model='many', type='GPU', std_board_info=board,
            controlpath_id=objects.DriverControlPathID('PCI', info),
            deployable_list=[objects.DriverDeployable(
                name=f'{self.host}_0000:0b:00.0_t{t}', num_accelerators=2,
                attribute_list=[objects.DriverAttribute('rc', f'CUSTOM_MANY_T{t}'),
                                objects.DriverAttribute('trait0', 'CUSTOM_MANY')],
                attach_handle_list=[objects.DriverAttachHandle('PCI', info)] * 2,
                driver_name='manytypes') for t in range(self.types)])]


@pytest.mark.parametrize('excluded', [False, True])
def test_many_providers_registered_in_batches(transport, database, db, conf, placement, excluded):
    """A first report with many providers: each created and given its traits, the
    inventories in one reshape whose reserved follows the reservation rule (an
    excluded device is in error: reserved whole); then quiet cycles, also after a
    restart, write nothing."""
    client, server = placement
    host = placement_fixture.unique_name('host')
    before = dict(client.stats)
    driver = ManyTypesDriver(conf, host, excluded=excluded)
    conductor, agent = cf.stack(database, transport, conf, client, host=host, drivers=[driver])
    n = driver.types
    writes = client.stats['writes'] - before['writes']
    # compute node, then per provider POST + traits, the custom names once
    # (CUSTOM_MANY and n classes; some may exist from an earlier test), one reshape.
    assert 1 + 2 * n + 1 <= writes <= 1 + 2 * n + 1 + 1 + n
    # Reads: none. A host Steward has no row of gets its compute node created
    # without a lookup (steward/conductor/report/first.py), a root this report
    # created is not listed, no provider is read before being created, and the
    # generations after the reshape are counted for the providers it created.
    assert client.stats['reads'] - before['reads'] == 0
    with database.reader() as s:
        deps = [d for d in deployable_db.deployable_list(s) if d.name.startswith(host)]
    assert len(deps) == n
    for dep in deps:
        inv = _inventory(server, dep.rp_uuid)
        (rc, record), = inv.items()
        assert record['total'] == 2
        assert record['reserved'] == (2 if excluded else 0)
        assert 'CUSTOM_MANY' in client.get_traits(dep.rp_uuid)
        # The generation counted is Placement's: the client's memory holds.
        generation = client.get_provider(dep.rp_uuid)['generation']
        assert client.remembered_inventory(dep.rp_uuid, generation) == inv
    quiet = dict(client.stats)
    assert cf.summary(agent.run_cycle()) == {'changed': False, 'placement_writes': 0}
    assert client.stats == quiet
    conductor.reporter.forget()
    client.forget()
    assert agent.run_cycle()['placement_writes'] == 0
    assert client.stats['writes'] == quiet['writes']


class SwappableDriver(base.Driver):
    """Two single-function devices; the functions in ``hidden`` are not
    discovered (swapped out)."""
    name = 'swappable'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.hidden = set()

    def discover(self):
        # Not named as Nova names a PCI provider: no traits read.
        return [_one_function(objects.pci_info('0000', '0c', '00', fn), 'swappable',
                              f'{self.host}_swappable{fn}', 'CUSTOM_SWAPPABLE',
                              'CUSTOM_SWAP', 'swappable')
                for fn in ('1', '2') if fn not in self.hidden]


def test_a_device_back_through_another_conductor_gets_its_provider_again(
        transport, database, db, conf, placement):
    """Conductor A registers a host's devices, conductor B takes the report in
    which one of them is gone and deletes its provider, and A takes the report in
    which it is back: A's Placement client still remembers the provider as it
    was (nothing of it moved in A's sight), and the report must create it
    again, not take it for present. The device it did not lose keeps its memory:
    the report reads nothing of either provider."""
    client_a, server = placement
    client_b = placement_fixture.client_and_server()[0]
    a, b = cf.conductor_on(database, transport, client_a), \
        cf.conductor_on(database, transport, client_b)
    host = placement_fixture.unique_name('swap')
    driver = SwappableDriver(conf, host)
    agent = AgentManager(conf, LocalConductorAPI(a), host=host, drivers=[driver])
    first = agent.run_cycle()
    assert first['changed'] and 'error' not in first
    rp = {name[-1]: uuid
          for name, uuid in ((d.name, d.rp_uuid) for d in _deployables(database, host))}
    assert sorted(rp) == ['1', '2']
    generation = client_a.get_provider(rp['1'])['generation']
    assert client_a.remembered_inventory(rp['1'], generation) == _inventory(server, rp['1'])

    driver.hidden = {'1'}
    agent.conductor = LocalConductorAPI(b)
    gone = agent.run_cycle()
    assert gone['changed'] and 'error' not in gone
    with placement_fixture.admin_session(server.url) as s:
        assert s.get(f'/resource_providers/{rp["1"]}').status_code == 404
    # A's memory of it, from before B deleted it: what a sync compares with.
    assert client_a.remembered_inventory(rp['1'], generation) is not None

    driver.hidden = set()
    agent.conductor = LocalConductorAPI(a)
    before = dict(client_a.stats)
    back = agent.run_cycle()
    assert back['changed'] and 'error' not in back, back
    # Read: the compute node's tree, listed for every changed report; neither
    # provider on its own (the one back is absent from that listing, so it is
    # created without a read). Written: it, its traits and its inventory.
    assert client_a.stats['reads'] - before['reads'] == 1
    assert back['placement_writes'] == 3
    assert sorted(d.rp_uuid for d in _deployables(database, host)) == sorted(rp.values())
    with placement_fixture.admin_session(server.url) as s:
        found = s.get(f'/resource_providers/{rp["1"]}')
        assert found.status_code == 200, found.text
        traits = set(s.get(f'/resource_providers/{rp["1"]}/traits').json()['traits'])
    assert found.json()['parent_provider_uuid'] == client_a.ensure_compute_node(host)
    assert _inventory(server, rp['1'])['CUSTOM_SWAPPABLE']['total'] == 1
    assert {'CUSTOM_SWAP', 'OWNER_CYBORG'} <= traits
    # And the next report of the host is quiet again, whichever conductor takes it.
    for conductor, client in ((a, client_a), (b, client_b)):
        agent.conductor = LocalConductorAPI(conductor)
        quiet = dict(client.stats)
        assert cf.summary(agent.run_cycle()) == {'changed': False, 'placement_writes': 0}
        assert client.stats == quiet


def test_a_host_registered_again_through_another_conductor_gets_its_providers_again(
        transport, database, db, conf, placement):
    """The first registration's batch (steward/conductor/report/first.py) too: a
    conductor whose drift repair synced a provider, which another conductor
    deleted since (the host's devices all gone), creates it when the host
    registers its devices again through it."""
    client_a, server = placement
    client_b = placement_fixture.client_and_server()[0]
    a, b = cf.conductor_on(database, transport, client_a), \
        cf.conductor_on(database, transport, client_b)
    # A's memory of the reports' digests stays the one read now (no host): the
    # host's reports to A are first registrations for as long as it has no row.
    a.reporter.stored.refresh = float('inf')
    assert a.reporter.stored.cached('no-such-host') is None
    host = placement_fixture.unique_name('again')
    driver = SwappableDriver(conf, host)
    driver.hidden = {'2'}
    agent = AgentManager(conf, LocalConductorAPI(b), host=host, drivers=[driver])
    assert 'error' not in agent.run_cycle()
    (dep,) = _deployables(database, host)
    # Changed behind Steward's back, repaired by A's drift repair: A's client
    # remembers all of the provider now.
    with placement_fixture.admin_session(server.url) as s:
        body = s.get(f'/resource_providers/{dep.rp_uuid}/inventories').json()
        r = s.put(f'/resource_providers/{dep.rp_uuid}/inventories/CUSTOM_SWAPPABLE',
                  json=dict(body['inventories']['CUSTOM_SWAPPABLE'], total=3,
                            max_unit=3, resource_provider_generation=body[
                                'resource_provider_generation']))
        assert r.status_code == 200, r.text
    ctx = cf.admin()
    assert a.periodic.repair_placement_drift(ctx) == [(dep.rp_uuid, 'inventory')]
    generation = client_a.get_provider(dep.rp_uuid)['generation']
    assert client_a.remembered_inventory(dep.rp_uuid, generation) is not None

    driver.hidden = {'1', '2'}
    assert 'error' not in agent.run_cycle()
    assert _deployables(database, host) == []
    with placement_fixture.admin_session(server.url) as s:
        assert s.get(f'/resource_providers/{dep.rp_uuid}').status_code == 404

    driver.hidden = {'2'}
    agent.conductor = LocalConductorAPI(a)
    back = agent.run_cycle()
    assert back['changed'] and 'error' not in back, back
    assert [d.rp_uuid for d in _deployables(database, host)] == [dep.rp_uuid]
    with placement_fixture.admin_session(server.url) as s:
        found = s.get(f'/resource_providers/{dep.rp_uuid}')
        assert found.status_code == 200, found.text
    assert _inventory(server, dep.rp_uuid)['CUSTOM_SWAPPABLE']['total'] == 1
    assert {'CUSTOM_SWAP', 'OWNER_CYBORG'} <= client_b.get_traits(dep.rp_uuid)


def _deployables(database, host):
    with database.reader() as s:
        return [d for d in deployable_db.deployable_list(s) if d.name.startswith(host)]

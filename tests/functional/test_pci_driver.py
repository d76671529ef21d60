"""The pci driver with the real conductor and a real Placement: this machine's own
/sys (read-only), the ARQ API at 2.3/2.4 on a fake SR-IOV tree, and a ``managed``
changed in configuration between two agent runs."""
import json
import logging
import os
import uuid

import pytest
from starlette import testclient

from steward.agent.manager import AgentManager
from steward.conductor.report import providers
from steward.conductor.local_api import LocalConductorAPI
from steward.db import arqs as arq_db
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.drivers.pci.driver import PciDriver
from tests.fixtures import placement_fixture
from tests.fixtures import requirements
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.fixtures.sysfs_tree import make_pci, make_sriov

SYS_PCI = '/sys/bus/pci/devices'
URL = '/v2/accelerator_requests'
RC = 'CUSTOM_PCI_10DE_25B6'
NO_KEY, UNMANAGED = '0000:25:00.5', '0000:25:00.4'


pytestmark = pytest.mark.usefixtures('parsed_conf')


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


@pytest.fixture
def host():
    return placement_fixture.unique_name('cmp')


def configure(conf, sysfs_root, *entries):
    conf.set_override('sysfs_root', str(sysfs_root))
    conf.set_override('device_spec', [json.dumps(e) for e in entries], group='pci')


def admin_get(server, path):
    with placement_fixture.admin_session(server.url) as s:
        r = s.get(path)
        assert r.status_code == 200, r.text
        return r.json()


def allocate(server, consumer, rp_uuid, rc):
    """Nova's claim, made before it binds the ARQ."""
    with placement_fixture.admin_session(server.url) as s:
        r = s.put(f'/allocations/{consumer}', json={
            'allocations': {rp_uuid: {'resources': {rc: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text


def deployables(database):
    with database.reader() as s:
        return {d.name: d for d in deployable_db.deployable_list(s)}


def handles(database):
    """attach handles by address, with their stored attach_info parsed."""
    with database.reader() as s:
        rows = s.query(m.AttachHandle).all()
    out = {}
    for h in rows:
        info = json.loads(h.attach_info)
        out[f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"] = (
            h, info)
    return out


# -- this machine's real /sys, read-only -------------------------------------------
def _read(bdf, name):
    with open(os.path.join(SYS_PCI, bdf, name)) as f:
        return f.read().strip()


def real_device():
    """A real PCI function to configure, virtio (1af4) preferred; chosen at run time."""
    try:
        names = sorted(os.listdir(SYS_PCI))
    except OSError:
        names = []
    if not names:
        requirements.need('pci', f'{SYS_PCI} has no device on this machine')
    # A PF with VFs enabled is (rightly) not reported; pick a function without.
    usable = [n for n in names
              if not any(e.startswith('virtfn') for e in os.listdir(os.path.join(SYS_PCI, n)))]
    virtio = [n for n in usable if _read(n, 'vendor') == '0x1af4']
    return (virtio or usable)[0]


def test_real_sysfs_device_becomes_device_rp_and_handle(transport, database, db, conf, placement, host):
    client, server = placement
    bdf = real_device()
    vendor, product = (_read(bdf, n)[2:].lower() for n in ('vendor', 'device'))
    configure(conf, '/sys', {'address': bdf, 'traits': ['real-sysfs']})
    cf.stack(database, transport, conf, client, host=host, drivers=[PciDriver(conf, host)])

    with database.reader() as s:
        (device,) = device_db.device_list(s)
    assert (device.type, device.vendor, device.model, device.hostname) == (
        'PCI', vendor, product, host)
    board = json.loads(device.std_board_info)
    assert board['address'] == bdf and board['vendor_id'] == vendor
    link = os.path.join(SYS_PCI, bdf, 'driver')
    assert board['driver'] == (os.path.basename(os.readlink(link))
                               if os.path.islink(link) else None)

    (dep,) = deployables(database).values()
    assert (dep.name, dep.num_accelerators, dep.driver_name) == (f'{host}_{bdf}', 1, 'pci')
    rc = f'CUSTOM_PCI_{vendor.upper()}_{product.upper()}'
    rp = admin_get(server, f'/resource_providers/{dep.rp_uuid}')
    assert rp['name'] == f'{host}_{bdf}'
    compute = admin_get(server, f'/resource_providers?name={host}')['resource_providers']
    assert rp['parent_provider_uuid'] == compute[0]['uuid']
    inv = admin_get(server, f'/resource_providers/{dep.rp_uuid}/inventories')['inventories']
    assert list(inv) == [rc]
    assert (inv[rc]['total'], inv[rc]['reserved'], inv[rc]['max_unit']) == (1, 0, 1)
    traits = admin_get(server, f'/resource_providers/{dep.rp_uuid}/traits')['traits']
    assert set(traits) == {'OWNER_CYBORG', 'CUSTOM_REAL_SYSFS'}

    (handle, info) = handles(database)[bdf]
    assert (handle.attach_type, handle.in_use) == ('PCI', False)
    d, b, rest = bdf.split(':')
    assert info == {'domain': d, 'bus': b, 'device': rest[:2], 'function': rest[3:],
                    'managed': True}


# -- through the ARQ API, managed false and absent ---------------------------------
@pytest.fixture
def sriov_tree(tmp_path):
    root = tmp_path / 'sys'
    make_sriov(root, '0000:25:00.0', '0x10de', '0x2236', [UNMANAGED, NO_KEY],
               vf_product='0x25b6', vf_driver='vfio-pci')
    return root


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_bound_pci_arqs_show_managed_from_2_4(transport, database, db, conf, placement, host, sriov_tree):
    client, server = placement
    configure(conf, sriov_tree,
              {'vendor_id': '10de', 'product_id': '25b6', 'address': UNMANAGED,
               'managed': 'no'},
              {'vendor_id': '10de', 'product_id': '25b6'})
    conductor, _ = cf.stack(database, transport, conf, client, host=host, drivers=[PciDriver(conf, host)])
    deps = deployables(database)
    rps = {a: deps[f'{host}_{a}'].rp_uuid for a in (UNMANAGED, NO_KEY)}

    with testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                               raise_server_exceptions=False) as api:
        r = api.post('/v2/device_profiles', json=[{'name': 'vf', 'groups': [
            {f'resources:{RC}': '1'}]}])
        assert r.status_code == 201, r.text
        instances, arqs = {}, {}
        for addr, rp in rps.items():
            arq = api.post(URL, json={'device_profile_name': 'vf'}).json()['arqs'][0]
            inst = instances[addr] = str(uuid.uuid4())
            allocate(server, inst, rp, RC)
            r = api.patch(URL, json={arq['uuid']: [
                {'op': 'add', 'path': '/hostname', 'value': host},
                {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
                {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
            assert r.status_code == 202, r.text
            arqs[addr] = arq['uuid']

        def views(addr, version):
            h = {'OpenStack-API-Version': f'accelerator {version}'}
            one = api.get(f'{URL}/{arqs[addr]}', headers=h)
            resolved = api.get(URL, params={'instance': instances[addr],
                                            'bind_state': 'resolved'}, headers=h)
            assert one.status_code == resolved.status_code == 200
            listed = [a for a in api.get(URL, headers=h).json()['arqs']
                      if a['uuid'] == arqs[addr]]
            return [one.json(), resolved.json()['arqs'][0]] + listed

        address_keys = {'domain', 'bus', 'device', 'function'}
        for addr, managed in ((UNMANAGED, False), (NO_KEY, True)):
            docs = views(addr, '2.3')
            assert len(docs) == 3
            for doc in docs:
                assert doc['state'] == 'Bound' and doc['attach_handle_type'] == 'PCI'
                assert set(doc['attach_handle_info']) == address_keys
            for doc in views(addr, '2.4'):
                info = doc['attach_handle_info']
                assert info['managed'] is managed
                assert f"{info['domain']}:{info['bus']}:{info['device']}." \
                       f"{info['function']}" == addr

        # A single-function device is reserved whole while bound, freed after.
        def reserved(addr):
            return admin_get(server, f'/resource_providers/{rps[addr]}/inventories'
                             )['inventories'][RC]['reserved']
        assert [reserved(a) for a in rps] == [1, 1]
        for addr in rps:
            assert api.delete(f'{URL}?instance={instances[addr]}').status_code == 204
        assert [reserved(a) for a in rps] == [0, 0]
        assert not any(h.in_use for h, _ in handles(database).values())


# -- managed changed in configuration between two agent runs -----------------------
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_changed_managed_reaches_free_handles_and_waits_for_bound_ones(transport, database,
        db, conf, placement, host, sriov_tree, caplog):
    client, server = placement
    configure(conf, sriov_tree, {'vendor_id': '10de', 'product_id': '25b6'})
    conductor, first = cf.stack(database, transport, conf, client, host=host, drivers=[PciDriver(conf, host)])
    before = handles(database)
    assert {a: i['managed'] for a, (_, i) in before.items()} == {UNMANAGED: True,
                                                                  NO_KEY: True}

    cf.make_profile(database, 'vf', [{f'resources:{RC}': '1'}])
    rp = deployables(database)[f'{host}_{UNMANAGED}'].rp_uuid
    inst = str(uuid.uuid4())
    allocate(server, inst, rp, RC)
    arq = conductor.arq_create(cf.admin(), 'vf', 'p')[0]
    conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': host,
                                     'device_rp_uuid': rp, 'instance_uuid': inst}])
    assert handles(database)[UNMANAGED][0].in_use

    # The operator sets managed=false and restarts the agent: a new driver instance
    # reads the new configuration.
    configure(conf, sriov_tree, {'vendor_id': '10de', 'product_id': '25b6',
                                 'managed': False})
    second = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                          drivers=[PciDriver(conf, host)])
    second.init_host()
    second.run_cycle()
    after = handles(database)
    assert after[NO_KEY][1]['managed'] is False                 # free: updated
    assert after[UNMANAGED][1]['managed'] is True               # bound: untouched
    assert {a: h.uuid for a, (h, _) in after.items()} == {
        a: h.uuid for a, (h, _) in before.items()}              # same handles
    assert any('is in use' in r.getMessage() for r in caplog.records)
    with database.reader() as s:
        (row,) = arq_db.arq_list(s, instance_uuid=inst)
        assert row.attach_handle_id == after[UNMANAGED][0].id

    second.run_cycle()                                          # still bound: still held
    assert handles(database)[UNMANAGED][1]['managed'] is True

    conductor.arq_delete(cf.admin(), instance_uuid=inst)
    second.run_cycle()                                          # released: applied
    final = handles(database)
    assert final[UNMANAGED][1]['managed'] is False
    assert final[UNMANAGED][0].uuid == before[UNMANAGED][0].uuid


# -- a device Nova already has in Placement ----------------------------------------
@pytest.mark.parametrize('naming', ['pci_in_placement', 'vgpu_parent'])
def test_nova_owned_provider_is_left_alone(transport, database, db, conf, placement, host, tmp_path, caplog,
                                           naming):
    """Nova's PCI-in-Placement provider ``<hypervisor>_<ADDRESS>``, or the vGPU
    parent provider its libvirt driver names ``<hypervisor>_pci_0000_81_00_0``,
    without OWNER_CYBORG: Steward must not adopt or rewrite it, and says so at
    ERROR."""
    client, server = placement
    root = tmp_path / 'sys'
    addr = '0000:81:00.0'
    make_pci(root, addr, '0x10de', '0x25b6', driver='vfio-pci')
    compute = client.ensure_compute_node(host)
    nova_rp = str(uuid.uuid4())
    nova_name = f'{host}_{addr.upper()}' if naming == 'pci_in_placement' else \
        f'{host}_pci_0000_81_00_0'
    with placement_fixture.admin_session(server.url) as s:
        assert s.post('/resource_providers', json={
            'uuid': nova_rp, 'name': nova_name,
            'parent_provider_uuid': compute}).status_code == 200
        s.put(f'/resource_classes/{RC}')
        r = s.put(f'/resource_providers/{nova_rp}/inventories', json={
            'resource_provider_generation': 0,
            'inventories': {RC: {'total': 1}}})
        assert r.status_code == 200, r.text

    def state():
        return [admin_get(server, f'/resource_providers/{nova_rp}{sub}')
                for sub in ('', '/inventories', '/traits')]
    before = state()

    configure(conf, root, {'address': addr})
    with caplog.at_level(logging.ERROR):
        _, agent = cf.stack(database, transport, conf, client, host=host, drivers=[PciDriver(conf, host)])
        agent.run_cycle()
    assert state() == before
    assert 'OWNER_CYBORG' not in before[2]['traits']
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    # Skipped once, at the first report; the quiet cycle after it says nothing new.
    assert len(said) == 1 and nova_name in said[0] and 'is skipped' in said[0] \
        and 'without OWNER_CYBORG' in said[0]
    assert f'{host}_{addr}' not in deployables(database)          # never handed out
    ours = providers.rp_uuid_for(f'{host}_{addr}')
    with placement_fixture.admin_session(server.url) as s:
        assert s.get(f'/resource_providers/{ours}').status_code == 404


def test_nova_owned_pf_hides_its_vfs_and_case_does_not_matter(transport, database, db, conf, placement, host,
                                                             tmp_path, caplog):
    """Nova upper-cases hex letters in its provider names and accounts VFs under
    the PF's provider: a VF of a Nova-owned PF is Nova's too."""
    client, server = placement
    root = tmp_path / 'sys'
    pf, vf = '0000:af:00.0', '0000:af:00.1'
    make_pci(root, pf, '0x8086', '0x0d58')
    make_pci(root, vf, '0x8086', '0x0d59', physfn=pf, driver='vfio-pci')
    compute = client.ensure_compute_node(host)
    with placement_fixture.admin_session(server.url) as s:
        assert s.post('/resource_providers', json={
            'uuid': str(uuid.uuid4()), 'name': f'{host}_{pf.upper()}',
            'parent_provider_uuid': compute}).status_code == 200
    configure(conf, root, {'address': '*:af:00.*'})
    with caplog.at_level(logging.ERROR):
        cf.stack(database, transport, conf, client, host=host, drivers=[PciDriver(conf, host)])
    assert deployables(database) == {}
    assert any(vf in r.getMessage() and 'is skipped' in r.getMessage()
               for r in caplog.records)

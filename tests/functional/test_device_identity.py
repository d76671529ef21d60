"""A device keeps its row when it vanishes from discovery (unless it is available)
and when it comes back at another PCI address: same uuid, same state, same erase
records and history, and Placement never offers it meanwhile."""
import json
import logging
import uuid

from steward.common import exception
from steward.conductor import device_match
from steward.conductor.report import providers
from steward.db import models as m
from steward.drivers import objects
from tests.functional.lifecycle_stack import RC, V26, life  # noqa: F401 (fixture)

SLOT_A, SLOT_B = '0000:0a:00.0', '0000:0b:00.0'
DRIVE_1 = ('SN-1', 'nqn.2014-08.org.example:ctrl-1')
DRIVE_2 = ('SN-2', 'nqn.2014-08.org.example:ctrl-2')


def _in_error(st, life):
    dev = st.device()
    life.driver.fail = exception.SanitizeFailed(device=dev['uuid'], reason='media error')
    inst, _ = st.bind(dev)
    st.release(inst)
    st.wait_state(dev['uuid'], ('error',))
    life.driver.fail = None
    return st.device(dev['uuid'])


def _cpid(database, dev_uuid):
    with database.reader() as s:
        return s.query(m.ControlpathID).join(m.Device).filter(
            m.Device.uuid == dev_uuid).one().cpid_info


def _reserved_whole(st, dev):
    """Every provider of the device: reserved == total (never offered)."""
    deps = st.deployables(dev)
    assert deps, dev
    for dep in deps:
        inv = st.inventory(dep['rp_uuid'])
        assert inv['reserved'] == inv['total'] == 1, (dep['name'], inv)
    return deps


def test_an_error_device_that_vanishes_is_kept_and_returns_in_error(life, caplog):
    st = life.start()
    dev = _in_error(st, life)
    records = st.records(dev['uuid'])
    history = st.history(dev['uuid'])
    assert dev['missing'] is False and dev['missing_since'] is None
    rp = _reserved_whole(st, dev)[0]['rp_uuid']

    life.driver.slots = {}
    with caplog.at_level(logging.INFO, logger='steward.conductor.report'):
        st.discover()
        st.agent.run_cycle()                # the same report: nothing new to say
    gone = st.device(dev['uuid'])
    assert (gone['device_state'], gone['missing']) == ('error', True)
    assert gone['missing_since'] and gone['last_error'] == dev['last_error']
    assert [d['rp_uuid'] for d in _reserved_whole(st, gone)] == [rp]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and 'no longer discovered' in r.getMessage()]
    assert len(warnings) == 1 and dev['uuid'] in warnings[0].getMessage()
    # At 2.5 nothing changes for old clients.
    old = st.api.get(f'/v2/devices/{dev["uuid"]}',
                     headers={'OpenStack-API-Version': 'accelerator 2.5'}).json()
    assert 'missing' not in old and 'last_error' not in old and old['device_state'] == 'error'
    # Nothing to clean until it is back.
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V26)
    assert r.status_code == 409 and r.json()['error_code'] == 'cyb.device.missing'
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean',
                    headers={'OpenStack-API-Version': 'accelerator 2.5'})
    assert r.status_code == 409 and r.json()['error_code'] == 'cyb.device.missing'
    plan = st.api.get(f'/v2/devices/{dev["uuid"]}/clean_plan', headers=V26).json()
    assert plan['accepted'] is False and plan['refusal']['code'] == 'cyb.device.missing'

    life.driver.slots = {SLOT_A: DRIVE_1}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger='steward.conductor.report'):
        st.discover()
    back = st.device(dev['uuid'])
    assert (back['device_state'], back['missing'], back['missing_since']) == \
        ('error', False, None)
    assert [d['rp_uuid'] for d in _reserved_whole(st, back)] == [rp]
    assert st.records(dev['uuid']) == records and st.history(dev['uuid']) == history
    assert any('reported again' in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)
    assert st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V26).status_code == 202
    assert st.wait_state(dev['uuid'], ('available',))['last_error'] is None


def test_a_device_back_at_another_address_keeps_its_row_and_is_never_offered(database,
        life, caplog):
    st = life.start()
    dev = _in_error(st, life)
    records = st.records(dev['uuid'])
    old_rp = _reserved_whole(st, dev)[0]['rp_uuid']
    life.driver.slots = {}
    st.discover()
    assert st.device(dev['uuid'])['missing'] is True
    _reserved_whole(st, dev)

    life.driver.slots = {SLOT_B: DRIVE_1}           # the same drive, another slot
    with caplog.at_level(logging.INFO, logger='steward.placement'):
        st.discover()
    moved = st.device(dev['uuid'])
    assert len(st.devices()) == 1
    assert (moved['device_state'], moved['missing']) == ('error', False)
    assert moved['last_error'] == dev['last_error']
    assert st.records(dev['uuid']) == records
    assert json.loads(_cpid(database, dev['uuid'])) == {'domain': '0000', 'bus': '0b',
                                             'device': '00', 'function': '0'}
    dep = st.deployable(moved)
    assert dep['name'] == f'{life.host}_{SLOT_B}' and dep['rp_uuid'] != old_rp
    assert dep['rp_uuid'] == providers.rp_uuid_for(dep['name'])
    _reserved_whole(st, moved)
    assert st.providers() == {life.host: st.providers()[life.host],
                              dep['name']: dep['rp_uuid']}       # the old one is gone
    # Its first inventory was written reserved: never offered, not even for a moment.
    first = [r.getMessage() for r in caplog.records
             if dep['name'] in r.getMessage() and 'inventory' in r.getMessage()][0]
    assert "inventory {} -> {'" + RC in first and "'reserved': 1" in first, first
    with database.reader() as s:
        handles = s.query(m.AttachHandle).join(m.Deployable).filter(
            m.Deployable.uuid == dep['uuid']).all()
        assert len(handles) == 1 and '"bus": "0b"' in handles[0].attach_info

    # Bound? Never: not available. Cleaned at its new address: back in the pool.
    assert st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V26).status_code == 202
    assert st.wait_state(dev['uuid'], ('available',))
    assert st.inventory(dep['rp_uuid'])['reserved'] == 0


def test_an_available_device_that_vanishes_is_removed(database, life):
    st = life.start()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    life.driver.slots = {}
    st.discover()
    assert st.devices() == []
    assert rp not in st.providers().values()
    with database.reader() as s:
        assert s.query(m.Device).filter_by(uuid=dev['uuid']).count() == 0


def test_another_drive_in_the_slot_is_a_new_device(life):
    st = life.start()
    dev = _in_error(st, life)
    rp = st.deployable(dev)['rp_uuid']
    life.driver.slots = {SLOT_A: DRIVE_2}           # drive 1 pulled, drive 2 put in
    st.discover()
    devices = {d['uuid']: d for d in st.devices()}
    assert len(devices) == 2
    new = next(d for u, d in devices.items() if u != dev['uuid'])
    old = devices[dev['uuid']]
    assert (old['device_state'], old['missing']) == ('error', True)
    assert (new['device_state'], new['missing']) == ('available', False)
    # The slot's provider now stands for the new drive; the old one keeps its state
    # and has nothing to offer.
    assert st.deployable(new)['rp_uuid'] == rp and st.inventory(rp)['reserved'] == 0
    assert st.deployables(old) == []
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V26)
    assert r.status_code == 409 and r.json()['error_code'] == 'cyb.device.missing'

    life.driver.slots = {SLOT_A: DRIVE_2, SLOT_B: DRIVE_1}     # drive 1 is back
    st.discover()
    back = st.device(dev['uuid'])
    assert (back['device_state'], back['missing']) == ('error', False)
    assert st.deployable(back)['name'] == f'{life.host}_{SLOT_B}'
    _reserved_whole(st, back)
    assert st.inventory(rp)['reserved'] == 0


def test_a_report_without_identity_keeps_the_row_at_its_address(database, life):
    st = life.start()
    dev = _in_error(st, life)
    life.driver.slots = {SLOT_A: ('', '')}      # id-ctrl failed: no serial, no NQN
    st.discover()
    assert [d['uuid'] for d in st.devices()] == [dev['uuid']]
    assert st.device(dev['uuid'])['device_state'] == 'error'
    with database.reader() as s:
        assert s.query(m.Device).filter_by(uuid=dev['uuid']).one().identity == \
            f'nvme:{DRIVE_1[0]}:{DRIVE_1[1]}'


def test_identity_is_serial_and_nqn_of_nvme_devices_only():
    def dev(type_='NVME', vendor='{"serial": " S1 ", "subsysnqn": "nqn.x"}'):
        return objects.DriverDevice(vendor='v', model='m', type=type_,
                                    controlpath_id=objects.DriverControlPathID('PCI', '{}'),
                                    vendor_board_info=vendor)
    assert device_match.identity_of(dev()) == 'nvme:S1:nqn.x'
    assert device_match.identity_of(dev(type_='GPU')) is None
    for vendor in ('{"serial": "S1"}', '{"serial": "", "subsysnqn": "n"}', 'junk', '[]',
                   '{"serial": 1, "subsysnqn": "n"}', None):
        assert device_match.identity_of(dev(vendor=vendor)) is None, vendor


def test_a_missing_device_cannot_be_bound(life):
    st = life.start()
    dev = st.device()
    inst, arq = st.bind(dev)
    rp = st.deployable(dev)['rp_uuid']
    life.driver.slots = {}
    st.discover()
    gone = st.device(dev['uuid'])
    assert (gone['device_state'], gone['missing']) == ('allocated', True)
    assert st.inventory(rp)['reserved'] == 1
    arq2 = st.api.post('/v2/accelerator_requests',
                       json={'device_profile_name': 'life'}).json()['arqs'][0]['uuid']
    r = st.api.patch('/v2/accelerator_requests', json={arq2: [
        {'op': 'add', 'path': '/hostname', 'value': life.host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert r.status_code == 409 and r.json()['error_code'] == 'cyb.device.missing'
    # Released while missing: nothing to clean it on, it stays allocated and reserved.
    st.release(inst)
    assert st.device(dev['uuid'])['device_state'] == 'allocated'
    assert st.inventory(rp)['reserved'] == 1
    assert life.driver.cleaned == []


def test_a_bound_device_reported_at_another_address_moves_once_released(life):
    st = life.start()
    dev = st.device()
    old = st.deployable(dev)
    inst, _ = st.bind(dev)
    life.driver.slots = {SLOT_B: DRIVE_1}
    st.discover()
    # Still one deployable, the one in use: a second would be offered meanwhile.
    assert st.device(dev['uuid'])['device_state'] == 'allocated'
    assert [d['uuid'] for d in st.deployables(dev)] == [old['uuid']]
    assert f'{life.host}_{SLOT_B}' not in st.providers()
    assert st.inventory(old['rp_uuid'])['reserved'] == 1
    st.release(inst)
    st.wait_state(dev['uuid'], ('available',))
    st.discover()
    moved = st.deployable(st.device(dev['uuid']))
    assert moved['name'] == f'{life.host}_{SLOT_B}'
    assert old['rp_uuid'] not in st.providers().values()
    assert st.inventory(moved['rp_uuid'])['reserved'] == 0

"""ARQ create/bind/unbind/delete through the real conductor on real SQLite,
PostgreSQL and MariaDB."""
import concurrent.futures
import uuid

import pytest

from steward.common import exception
from steward.common import states
from steward.db import arqs as arq_db
from steward.db import device_profiles as profile_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import transitions
from steward.drivers.fake import FakeDriver
from tests.functional import conductor_fixtures as cf

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)


def _snapshot(database):
    with database.reader() as s:
        return {
            'arqs': sorted((a.uuid, a.state, a.attach_handle_id, a.instance_uuid)
                           for a in s.query(m.ExtARQ)),
            'in_use': sorted(h.id for h in s.query(m.AttachHandle).filter_by(in_use=True)),
            'devices': sorted((d.uuid, d.device_state, d.status) for d in s.query(m.Device)),
        }


def _bind(conductor, arq, dep, instance=None, **extra):
    b = {'uuid': arq['uuid'], 'hostname': 'host-a', 'device_rp_uuid': dep.rp_uuid,
         'instance_uuid': instance or str(uuid.uuid4())}
    b.update(extra)
    return conductor.arq_bind(cf.admin(), [b])


def test_create_one_arq_per_accelerator_per_group(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database, 'two-groups', [{'resources:FPGA': '2'},
                                   {'resources:FPGA': '1', 'trait:CUSTOM_X': 'required'}])
    arqs = conductor.arq_create(cf.admin(), 'two-groups', 'proj')
    assert [a['device_profile_group_id'] for a in arqs] == [0, 0, 1]
    assert {a['state'] for a in arqs} == {states.ARQ_INITIAL}
    assert {a['project_id'] for a in arqs} == {'proj'}


def test_bind_unbind_delete_restores_everything(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    before = _snapshot(database)
    dep = cf.deployable(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'proj')[0]
    inst = str(uuid.uuid4())
    bound = _bind(conductor, arq, dep, inst)[0]
    assert bound['state'] == states.ARQ_BOUND
    assert bound['attach_handle_type'] == 'TEST_PCI'
    assert set(bound['attach_handle_info']) == {'domain', 'bus', 'device', 'function'}
    assert conductor.notifier.events == [(inst, arq['uuid'], 'completed')]
    with database.reader() as s:
        assert device_db.device_list(s)[0].device_state == states.DEV_ALLOCATED
    conductor.arq_unbind(cf.admin(), [arq['uuid']])
    with database.reader() as s:
        a = arq_db.arq_get_many(s, [arq['uuid']])[0]
        assert (a.state, a.attach_handle_id, a.instance_uuid) == (states.ARQ_UNBOUND, None, None)
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE
    _bind(conductor, arq, dep)          # Unbound ARQs can be bound again
    conductor.arq_delete(cf.admin(), arq_uuids=[arq['uuid']])
    assert _snapshot(database) == before


@pytest.mark.parametrize('field,value,exc', [
    ('instance_uuid', 'not-a-uuid', exception.InvalidUUID),
    ('device_rp_uuid', 'nope', exception.InvalidUUID),
    ('device_rp_uuid', '3f1f3c9e-7a43-4f7b-9d3c-7e4b1d0e5a11', exception.DeployableNotFound),
    ('hostname', '', exception.InvalidParameter),
])
def test_invalid_bind_changes_nothing(transport, database, db, conf, field, value, exc):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'proj')[0]
    before = _snapshot(database)
    with pytest.raises(exc):
        _bind(conductor, arq, cf.deployable(database), **{field: value})
    assert _snapshot(database) == before
    # and the ARQ is still bindable: no stuck BindStarted (upstream defect)
    assert _bind(conductor, arq, cf.deployable(database))[0]['state'] == states.ARQ_BOUND


def test_rebinding_a_bound_arq_is_a_clean_4xx(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'proj')[0]
    _bind(conductor, arq, cf.deployable(database))
    before = _snapshot(database)
    with pytest.raises(exception.ARQBadState) as err:
        _bind(conductor, arq, cf.deployable(database))
    assert err.value.status == 400
    assert _snapshot(database) == before


def test_multi_arq_bind_is_all_or_nothing(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database, 'big', [{'resources:FPGA': '17'}])
    arqs = conductor.arq_create(cf.admin(), 'big', 'proj')
    before = _snapshot(database)
    dep, inst = cf.deployable(database), str(uuid.uuid4())
    with pytest.raises(exception.NoFreeAttachHandle):
        conductor.arq_bind(cf.admin(), [
            {'uuid': a['uuid'], 'hostname': 'host-a', 'device_rp_uuid': dep.rp_uuid,
             'instance_uuid': inst} for a in arqs])
    assert _snapshot(database) == before


def test_second_bind_for_same_instance_refused(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    a1 = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    a2 = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    inst = str(uuid.uuid4())
    _bind(conductor, a1, cf.deployable(database), inst)
    with pytest.raises(exception.ARQAlreadyBoundToInstance):
        _bind(conductor, a2, cf.deployable(database), inst)


def test_delete_by_instance_is_idempotent(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    assert conductor.arq_delete(cf.admin(), instance_uuid=str(uuid.uuid4())) == 0


def test_delete_by_unknown_uuid_deletes_nothing(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    before = _snapshot(database)
    with pytest.raises(exception.ARQNotFound):
        conductor.arq_delete(cf.admin(), arq_uuids=[arq['uuid'], str(uuid.uuid4())])
    assert _snapshot(database) == before


def test_profile_in_use_cannot_be_deleted(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    conductor.arq_create(cf.admin(), 'dp1', 'p')
    with pytest.raises(exception.DeviceProfileInUse):
        with database.writer() as s:
            profile_db.device_profile_delete(s, profile_db.device_profile_get(s, name='dp1'))


def test_a_profile_deleted_between_its_read_and_the_insert_is_not_found(
        transport, database, db, conf, monkeypatch):
    """The create reads the profile and inserts the ARQs in two transactions: a
    delete landing between them fails the INSERT's foreign key, answered as the
    profile not found, and nothing is left behind."""
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    named = profile_db.device_profile_named

    def read_then_deleted(conn, name):
        found = named(conn, name)
        with database.writer() as s:
            profile_db.device_profile_delete(s, profile_db.device_profile_get(s, name=name))
        return found
    monkeypatch.setattr(profile_db, 'device_profile_named', read_then_deleted)
    with pytest.raises(exception.DeviceProfileNotFound):
        conductor.arq_create(cf.admin(), 'dp1', 'p')
    assert _snapshot(database)['arqs'] == []


def test_leftover_deleting_rows_are_finished_at_start(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    _bind(conductor, arq, cf.deployable(database))
    with database.writer() as s:      # as if the process died right after Deleting
        row = arq_db.arq_get_many(s, [arq['uuid']])[0]
        transitions.advance(s, m.ExtARQ, row, states.ARQ_DELETING, event='delete')
    conductor.init_host()
    snap = _snapshot(database)
    assert snap['arqs'] == [] and snap['in_use'] == []
    assert snap['devices'][0][1] == states.DEV_AVAILABLE


@pytest.mark.slow
def test_32_concurrent_binds_on_16_handles(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    arqs = [conductor.arq_create(cf.admin(), 'dp1', 'p')[0] for _ in range(32)]

    def bind(arq):
        try:
            return _bind(conductor, arq, dep)[0]['state']
        except exception.NoFreeAttachHandle:
            return 'refused'

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(bind, arqs))
    assert results.count(states.ARQ_BOUND) == 16
    assert results.count('refused') == 16
    with database.reader() as s:
        rows = s.query(m.ExtARQ).all()
        handles = [a.attach_handle_id for a in rows if a.state == states.ARQ_BOUND]
        assert len(handles) == len(set(handles)) == 16
        assert {a.state for a in rows} == {states.ARQ_BOUND, states.ARQ_INITIAL}
        assert s.query(m.AttachHandle).filter_by(in_use=True).count() == 16


class TwoTypeParent(FakeDriver):
    """An mdev-like parent: a 4-instance type and a 1-instance type on one device."""

    def discover(self):
        from steward.drivers import objects
        dev = super().discover()[0]
        big = dev.deployable_list[0]
        big.num_accelerators, big.attach_handle_list = 4, big.attach_handle_list[:4]
        info = objects.pci_info('0000', '0c', '1f', '0')
        dev.deployable_list.append(objects.DriverDeployable(
            name=f'{self.host}_OneInstanceType', num_accelerators=1,
            attribute_list=[objects.DriverAttribute('rc', 'CUSTOM_ONE_TYPE')],
            attach_handle_list=[objects.DriverAttachHandle('TEST_PCI', info)],
            driver_name='fake'))
        return [dev]


def test_one_instance_type_on_a_shared_parent_binds_while_siblings_are_used(transport, database, db, conf):
    """The bind guard judges 'one accelerator' by the whole device, as the
    reservation rule does: a 1-instance type of a parent whose other type is in
    use is still free (it was refused as 'not available')."""
    conductor, _ = cf.stack(database, transport, conf, drivers=[TwoTypeParent(conf, 'host-a')])
    cf.make_profile(database, 'big', [{'resources:FPGA': '1'}])
    cf.make_profile(database, 'one', [{'resources:CUSTOM_ONE_TYPE': '1'}])
    _bind(conductor, conductor.arq_create(cf.admin(), 'big', 'p')[0], cf.deployable(database, 'FakeDevice'))
    arq = conductor.arq_create(cf.admin(), 'one', 'p')[0]
    assert _bind(conductor, arq, cf.deployable(database, 'OneInstanceType'))[0]['state'] == 'Bound'

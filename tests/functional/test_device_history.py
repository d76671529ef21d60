"""Device history and last_error, written by transitions.advance() in the transaction of
the change: one row per transition with who made it, none for a change that was
rolled back; last_error set entering error and cleared at available."""
import logging
import uuid

import pytest

from steward.common import exception
from steward.common import states
from steward.db import deployables as deployable_db
from steward.db import device_history as history_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import transitions
from tests.functional import conductor_fixtures as cf
from tests.functional.lifecycle_stack import V26, life  # noqa: F401 (fixture)

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)

OPERATOR = {'X-Roles': 'admin,member,reader', 'X-Project-Id': 'ops',
            'X-User-Id': 'alice', 'OpenStack-API-Version': 'accelerator 2.6'}


def _steps(history):
    return [(h['source_state'], h['event'], h['target_state'], h['actor'])
            for h in history]


def test_every_transition_of_a_cleanup_cycle_is_in_the_history(life, conf):
    st = life.start()
    dev = st.device()
    host = life.host
    conductor = f'conductor {conf.host}'
    assert st.history(dev['uuid']) == []        # discovered available: no transition
    inst, _ = st.bind(dev)
    st.release(inst)
    st.wait_state(dev['uuid'], ('available',))
    assert _steps(st.history(dev['uuid'])) == [
        ('available', 'bind', 'allocated', conductor),
        ('allocated', 'release_for_cleaning', 'pending_cleaning', conductor),
        ('pending_cleaning', 'start_cleaning', 'cleaning', f'agent {host}'),
        ('cleaning', 'cleaned', 'available', f'agent {host}')]
    history = st.history(dev['uuid'])
    assert [set(h) for h in history] == [{'uuid', 'created_at', 'event', 'source_state',
                                          'target_state', 'reason', 'request_id',
                                          'actor'}] * 4
    assert history[0]['created_at'] <= history[-1]['created_at']
    assert all(h['request_id'].startswith('req-') for h in history)
    # The release and its cleanup carry the request id of Nova's delete.
    assert len({h['request_id'] for h in history[1:]}) == 1
    assert history[-1]['reason'] == 'test_erase verified'
    assert st.device(dev['uuid'])['last_error'] is None


def test_last_error_is_set_in_error_and_cleared_once_available(life, conf):
    st = life.start()
    dev = st.device()
    life.driver.fail = exception.VerifyFailed(device=dev['uuid'], reason='block 7 not zero')
    inst, _ = st.bind(dev)
    st.release(inst)
    failed = st.wait_state(dev['uuid'], ('error',))
    assert failed['last_error'] == ('cyb.cleanup.verify_failed: Read-back verification '
                                    f'of {dev["uuid"]} failed: block 7 not zero')
    assert st.history(dev['uuid'])[-1]['reason'] == failed['last_error']
    # The operator's re-clean is recorded as the operator's; error is kept until the
    # device is available again.
    life.driver.fail = None
    life.driver.hold = True
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=OPERATOR)
    assert r.status_code == 202, r.text
    assert life.driver.started.wait(10)
    cleaning = st.wait_state(dev['uuid'], ('cleaning',))
    assert cleaning['last_error'] == failed['last_error']
    life.driver.release.set()
    assert st.wait_state(dev['uuid'], ('available',))['last_error'] is None
    assert _steps(st.history(dev['uuid']))[-4:] == [
        ('cleaning', 'fail', 'error', f'agent {life.host}'),
        ('error', 'operator_clean', 'pending_cleaning', 'user alice'),
        ('pending_cleaning', 'start_cleaning', 'cleaning', f'agent {life.host}'),
        ('cleaning', 'cleaned', 'available', f'agent {life.host}')]
    assert st.history(dev['uuid'])[-3]['request_id'] == r.headers['x-openstack-request-id']


def _error_device(database, host):
    """A single-accelerator device in error (quarantined), built through advance."""
    with database.writer() as s:
        dev = m.Device(uuid=str(uuid.uuid4()), type='NVME', vendor='8086', model='0a54',
                       hostname=host, status='enabled', device_state='available')
        s.add(dev)
        s.flush()
        s.add(m.Deployable(uuid=str(uuid.uuid4()), name=f'{host}_0000:0b:00.0',
                           num_accelerators=1, device_id=dev.id,
                           rp_uuid=str(uuid.uuid4()), driver_name='nvme'))
        transitions.advance(s, m.Device, dev, states.DEV_ERROR, event='fail',
                            reason='excluded: no CES')
        return dev.uuid


def test_a_rolled_back_bind_leaves_no_history_and_logs_nothing(transport, database, db, conf, caplog):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    fake = cf.deployable(database, 'FakeDevice')
    broken = _error_device(database, 'host-a')
    with database.reader() as s:
        broken_id = device_db.device_get(s, broken).id
        broken_rp = deployable_db.deployable_list(s, {'device_id': broken_id})[0].rp_uuid
    arqs = conductor.arq_create(cf.admin(), 'dp1', 'proj') + \
        conductor.arq_create(cf.admin(), 'dp1', 'proj')
    inst = str(uuid.uuid4())
    caplog.set_level(logging.INFO, logger='steward.common.states')
    with pytest.raises(exception.DeviceNotAvailable):
        # The first ARQ takes the fake device (available -> allocated) before the
        # second is refused: the whole transaction rolls back.
        conductor.arq_bind(cf.admin(), [
            {'uuid': arqs[0]['uuid'], 'hostname': 'host-a', 'device_rp_uuid': fake.rp_uuid,
             'instance_uuid': inst},
            {'uuid': arqs[1]['uuid'], 'hostname': 'host-a', 'device_rp_uuid': broken_rp,
             'instance_uuid': inst}])
    with database.reader() as s:
        device = device_db.device_get_by_id(s, fake.device_id)
        assert device.device_state == states.DEV_AVAILABLE
        assert history_db.device_history_list(s, device.uuid) == []
        assert [(h.event, h.target_state, h.reason) for h in
                history_db.device_history_list(s, broken)] == [('fail', 'error', 'excluded: no CES')]
        assert device_db.device_get(s, broken).last_error == 'excluded: no CES'
    assert not [r for r in caplog.records if '->' in r.getMessage()], \
        'a rolled-back transition was logged'
    # The same bind without the refused ARQ commits, logs and records.
    conductor.arq_bind(cf.admin(), [{'uuid': arqs[0]['uuid'], 'hostname': 'host-a',
                                     'device_rp_uuid': fake.rp_uuid, 'instance_uuid': inst}])
    with database.reader() as s:
        device = device_db.device_get_by_id(s, fake.device_id)
        assert [(h.source_state, h.event, h.target_state) for h in
                history_db.device_history_list(s, device.uuid)] == [
            ('available', 'bind', 'allocated')]
    assert any(f'device {device.uuid}: available -> allocated (bind)' in r.getMessage()
               for r in caplog.records)


def test_history_outlives_a_device_that_is_removed(life):
    st = life.start()
    dev = st.device()
    inst, _ = st.bind(dev)
    st.release(inst)
    st.wait_state(dev['uuid'], ('available',))
    life.driver.slots = {}                  # pulled out while available: forgotten
    st.discover()
    assert st.devices() == []
    assert len(st.history(dev['uuid'])) == 4
    r = st.api.get(f'/v2/devices/{uuid.uuid4()}/history', headers=V26)
    assert r.status_code == 404 and r.json()['error_code'] == 'cyb.device.not_found'

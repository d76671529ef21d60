"""Erase records change status only through transitions.advance() (declared edges,
compare-and-swap), and a device created in error has a history row from the
start."""
from oslo_utils import uuidutils
import pytest

from steward.common import exception
from steward.common import states
from steward.db import erase_records as erase_db
from steward.db import models as m
from steward.db import transitions


def _running(s):
    return erase_db.erase_record_create(s, uuidutils.generate_uuid(), hostname='h',
                                  trigger='unbind', status=states.ERASE_RUNNING)


def test_a_running_record_ends_once(database, db):
    with database.writer() as s:
        uuid = _running(s).uuid
    # Two conductors read it running; the first to write wins.
    with database.reader() as s:
        stale = erase_db.erase_record_get(s, uuid)
    with database.writer() as s:
        rec = erase_db.erase_record_get(s, uuid)
        transitions.advance(s, m.EraseRecord, rec, states.ERASE_SUCCEEDED, event='succeed',
                            values=erase_db.erase_values({'phase': 'done', 'details': {'a': 1}}))
    with database.writer() as s:
        with pytest.raises(exception.ConcurrentUpdate):
            transitions.advance(s, m.EraseRecord, stale, states.ERASE_INTERRUPTED,
                                event='interrupt')
    with database.reader() as s:
        rec = erase_db.erase_record_get(s, uuid)
        assert rec.status == states.ERASE_SUCCEEDED and rec.phase == 'done'
        assert erase_db.erase_record_record(rec)['details'] == {'a': 1}
        # No edge leaves an ended record.
        with pytest.raises(exception.InvalidStateTransition):
            transitions.advance(s, m.EraseRecord, rec, states.ERASE_FAILED, event='fail')


def test_status_is_not_a_plain_column(database, db):
    with database.writer() as s:
        rec = _running(s)
        with pytest.raises(ValueError, match='transitions.advance'):
            erase_db.erase_record_update(s, rec.uuid, status=states.ERASE_FAILED)
        with pytest.raises(exception.InvalidStateTransition):
            erase_db.erase_record_create(s, rec.device_uuid, status=states.ERASE_SUCCEEDED)


def test_a_device_created_in_error_has_its_history_row(database, db):
    with database.writer() as s:
        bad = m.Device(uuid=uuidutils.generate_uuid(), type='NVME', vendor='8086',
                       model='m', hostname='h', status=states.DEVICE_STATUS_ENABLED,
                       device_state=states.DEV_ERROR,
                       last_error='excluded: no cleanup can be verified')
        good = m.Device(uuid=uuidutils.generate_uuid(), type='NVME', vendor='8086',
                        model='m', hostname='h', status=states.DEVICE_STATUS_ENABLED,
                        device_state=states.DEV_AVAILABLE)
        s.add_all([bad, good])
    with database.reader() as s:
        rows = s.query(m.DeviceHistory).filter_by(device_uuid=bad.uuid).all()
        assert [(r.event, r.source_state, r.target_state, r.reason) for r in rows] == [
            ('discovered', None, states.DEV_ERROR,
             'excluded: no cleanup can be verified')]
        assert s.query(m.DeviceHistory).filter_by(device_uuid=good.uuid).all() == []

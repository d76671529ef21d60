"""Erase records (one cleanup attempt of one device): queries on the
``erase_records`` table.

Row shape (``ROW``): ``m.EraseRecord`` ORM objects; ``erase_record_record`` makes the plain
dict the API and the RPC layer carry. ``status`` changes only through
steward.db.transitions.advance().
"""
import json

from oslo_utils import uuidutils
import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.db import models as m
from steward.db import query

ROW = m.EraseRecord


ERASE_RECORD_COLUMNS = ('hostname', 'pci_address', 'trigger', 'status', 'action',
                        'assurance_level', 'serial', 'model', 'firmware', 'started_at',
                        'finished_at', 'phase', 'progress', 'progress_detail', 'sstat',
                        'sstat_text', 'verification', 'verification_detail',
                        'error_code', 'error_message')


def erase_values(values) -> dict:
    """Column values of an erase record as stored (JSON columns encoded), for
    erase_record_create/update and transitions.advance(..., values=)."""
    out = {k: v for k, v in values.items() if k in ERASE_RECORD_COLUMNS}
    if 'capabilities' in values:
        out['capabilities'] = json.dumps(values['capabilities'], sort_keys=True)
    if 'details' in values:
        out['details'] = json.dumps(values['details'], sort_keys=True)
    if 'capability_decision' in values:
        out['capability_decision'] = json.dumps(values['capability_decision'],
                                                sort_keys=True)
    return out


def erase_record_create(session, device_uuid, **values) -> ROW:
    states.check_created('erase', values.get('status'))
    rec = m.EraseRecord(uuid=uuidutils.generate_uuid(), device_uuid=device_uuid,
                        **erase_values(values))
    session.add(rec)
    session.flush()
    return rec


def erase_record_get(session, uuid) -> ROW:
    return query.one(session, sa.select(m.EraseRecord).where(m.EraseRecord.uuid == uuid),
                     exception.ResourceNotFound, 'Erase record', 'uuid', uuid)


def erase_record_update(session, uuid, **values) -> ROW:
    """Every column but ``status``, which only transitions.advance() changes."""
    if 'status' in values:
        raise ValueError('an erase record\'s status changes through transitions.advance()')
    rec = erase_record_get(session, uuid)
    for key, value in erase_values(values).items():
        setattr(rec, key, value)
    return rec


def erase_record_list(session, device_uuid, limit=None, status=None) -> list[ROW]:
    """Newest first."""
    stmt = sa.select(m.EraseRecord).where(m.EraseRecord.device_uuid == device_uuid)
    if status is not None:
        stmt = stmt.where(m.EraseRecord.status == status)
    stmt = stmt.order_by(m.EraseRecord.id.desc())
    if limit:
        stmt = stmt.limit(limit)
    return session.execute(stmt).scalars().all()


def erase_record_record(rec) -> dict:
    """Storage-neutral view of an erase record."""
    out = {'uuid': rec.uuid, 'device_uuid': rec.device_uuid}
    for key in ERASE_RECORD_COLUMNS:
        out[key] = getattr(rec, key)
    out['started_at'] = query.timestamp(rec.started_at)
    out['finished_at'] = query.timestamp(rec.finished_at)
    out['capabilities'] = json.loads(rec.capabilities) if rec.capabilities else None
    out['details'] = json.loads(rec.details) if rec.details else {}
    out['capability_decision'] = (json.loads(rec.capability_decision)
                                        if rec.capability_decision else None)
    out['created_at'] = query.timestamp(rec.created_at)
    out['updated_at'] = query.timestamp(rec.updated_at)
    return out

"""Device history: one row per device state change, written by
steward.db.transitions.advance() in the transaction of the change, and the
notes of what happened to a device in its state (transitions.note: health).

Row shape (``ROW``): ``m.DeviceHistory`` ORM objects; ``device_history_record`` makes the
plain dict the API carries.
"""
import sqlalchemy as sa

from steward.db import models as m
from steward.db import query

ROW = m.DeviceHistory


def device_history_list(session, device_uuid) -> list[ROW]:
    """Oldest first."""
    stmt = (sa.select(m.DeviceHistory).where(m.DeviceHistory.device_uuid == device_uuid)
            .order_by(m.DeviceHistory.id))
    return session.execute(stmt).scalars().all()


def device_history_record(row) -> dict:
    """Storage-neutral view of a history row."""
    return {'uuid': row.uuid, 'created_at': query.timestamp(row.created_at),
            'event': row.event, 'source_state': row.source_state,
            'target_state': row.target_state, 'reason': row.reason,
            'request_id': row.request_id, 'actor': row.actor}


def device_entered(session, device_uuid, state) -> ROW | None:
    """The newest history row that moved the device into ``state``, or None."""
    stmt = (sa.select(m.DeviceHistory)
            .where(m.DeviceHistory.device_uuid == device_uuid,
                   m.DeviceHistory.target_state == state,
                   # a note (transitions.note) stays in its state: not an entry
                   sa.or_(m.DeviceHistory.source_state.is_(None),
                          m.DeviceHistory.source_state != m.DeviceHistory.target_state))
            .order_by(m.DeviceHistory.id.desc()).limit(1))
    return session.execute(stmt).scalar_one_or_none()

"""Devices: queries on the ``devices`` table.

Row shape (``ROW``; every function's annotation names it): ``m.Device`` ORM
objects, which the conductor changes in place (the state only through
steward.db.transitions.advance()). The API formats records (``device_record``,
``device_records``: plain dicts of the same columns), its listing of thousands
read without the ORM (perf.records). Counts and checks return ints and bools.
"""
import datetime
import json

import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.db import models as m
from steward.db import perf
from steward.db import query

ROW = m.Device
"""What the conductor reads and changes: ORM objects."""


_DEVICES_T = m.Device.__table__


DEVICE_FILTERS = ('uuid', 'id', 'type', 'vendor', 'model', 'hostname', 'status',
                  'device_state', 'health')


def device_get(session, uuid) -> ROW:
    return query.one(session, sa.select(m.Device).where(m.Device.uuid == uuid),
                     exception.DeviceNotFound, 'Device', 'uuid', uuid)


def device_get_by_id(session, device_id) -> ROW | None:
    return session.get(m.Device, device_id)


def device_list(session, filters=None) -> list[ROW]:
    stmt = sa.select(m.Device).where(*query.exact_filters(m.Device, filters, DEVICE_FILTERS))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()


def device_records(session, filters=None) -> list[dict]:
    """device_list as records (see perf.records): the API's listing."""
    table = m.Device.__table__
    stmt = sa.select(*perf.untyped(table.c)).where(
        *query.exact_filters(table.c, filters, DEVICE_FILTERS))
    return perf.records(session, table, stmt.order_by(table.c.id))


def device_record(device) -> dict:
    """A device (ROW) as the record device_records makes: the API's answer for one."""
    return perf.record(device)


def device_has_active_arq(session, device_id) -> bool:
    stmt = (sa.select(sa.func.count()).select_from(m.ExtARQ)
            .join(m.Deployable, m.ExtARQ.deployable_id == m.Deployable.id)
            .where(m.Deployable.device_id == device_id,
                   m.ExtARQ.state.in_(states.ARQ_HOLDS_HANDLE)))
    return session.execute(stmt).scalar() > 0


def device_handles_in_use(session, device_id) -> int:
    stmt = (sa.select(sa.func.count()).select_from(m.AttachHandle)
            .join(m.Deployable, m.AttachHandle.deployable_id == m.Deployable.id)
            .where(m.Deployable.device_id == device_id, m.AttachHandle.in_use.is_(True)))
    return session.execute(stmt).scalar()


def device_host_known(session, hostname) -> bool:
    """Does any agent report a device on ``hostname``?"""
    return session.execute(sa.select(_DEVICES_T.c.id).where(
        _DEVICES_T.c.hostname == hostname).limit(1)).first() is not None


def devices_in_states(session, hostname, device_states) -> list[ROW]:
    stmt = sa.select(m.Device).where(m.Device.hostname == hostname,
                                     m.Device.device_state.in_(device_states))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()


def device_driver_name(session, device_id) -> str | None:
    """driver_name of the device's (first) deployable, or None."""
    return session.execute(
        sa.select(m.Deployable.driver_name).where(m.Deployable.device_id == device_id)
        .order_by(m.Deployable.id).limit(1)).scalar()


def devices_in_states_anywhere(session, device_states) -> list[ROW]:
    """Devices of every host in ``device_states`` (the conductor's periodic tasks)."""
    stmt = sa.select(m.Device).where(m.Device.device_state.in_(device_states))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()


# The accelerators of the device of the row: the sum of its deployables'
# num_accelerators (what the reservation rule calls single or shared).
_ACCELERATORS = (sa.select(sa.func.coalesce(sa.func.sum(m.Deployable.num_accelerators), 0))
                 .where(m.Deployable.device_id == m.Device.id)
                 .correlate(m.Device).scalar_subquery())
_LOCK_COUNTED = {shared: perf.OneOrMany(
    m.Device.id, 'ids',
    lambda clause, shared=shared: sa.select(m.Device, _ACCELERATORS)
    .where(clause).order_by(m.Device.id).with_for_update(of=m.Device, read=shared)
    .execution_options(populate_existing=True)) for shared in (False, True)}


def devices_lock_counted(session, device_ids, shared=False) -> list[tuple[ROW, int]]:
    """Row-lock devices for the rest of the transaction, always in id order (a
    bind and a host's discovery report, which locks all of the host's devices,
    then queue on each other instead of deadlocking; SQLite writers are serial
    already and ignore FOR UPDATE), each with its accelerator count read in the
    same statement: [(Device, count)] in id order.

    ``shared``: a share lock (``FOR SHARE``, MariaDB's ``LOCK IN SHARE MODE``),
    for a transaction that reads the devices' state and writes none of them
    (a bind to a device allocated already: its handle is a compare-and-swap of
    its own). Share locks do not wait for each other, so binds to one shared
    device run side by side; anything that changes a device (a release's
    transition, a discovery report, a health latch) still waits for them, and
    they for it."""
    if not device_ids:
        return []
    return [tuple(row) for row in session.execute(
        *_LOCK_COUNTED[shared](sorted(set(device_ids)))).all()]


_HANDLES_IN_USE = (sa.select(sa.func.count()).select_from(m.AttachHandle)
                   .join(m.Deployable, m.AttachHandle.deployable_id == m.Deployable.id)
                   .where(m.Deployable.device_id == m.Device.id,
                          m.AttachHandle.in_use.is_(True))
                   .correlate(m.Device).scalar_subquery())
# The device of a deployable with what a release decides on, in one statement.
_DEVICE_OF_DEPLOYABLE = sa.select(m.Deployable.device_id).where(
    m.Deployable.id == sa.bindparam('deployable_id')).scalar_subquery()
_RELEASE_VIEW = (
    sa.select(m.Device, _ACCELERATORS, _HANDLES_IN_USE)
    .where(m.Device.id == _DEVICE_OF_DEPLOYABLE)
    .execution_options(populate_existing=True))


_RELEASE_LOCK = (sa.select(m.Device.id).where(m.Device.id == _DEVICE_OF_DEPLOYABLE)
                 .with_for_update(of=m.Device))


def device_release_view(session, deployable_id) -> tuple[ROW, int, int] | None:
    """(the device of ``deployable_id``, its accelerators, its handles in use), or
    None: what a release decides on.

    The device is row-locked first, in a statement of its own: the count is then
    read after every transaction that held the lock has committed (READ COMMITTED
    reads each statement's snapshot). Counted in the locking statement, it was
    read before the wait: two deletes freeing a shared device's last two handles
    each counted the other's handle in use and neither released it (left
    allocated with no handle in use), and a delete could count out the handle a
    bind holding the device's share lock was taking, and release the device
    under it. SQLite's writers are serial already (no second statement there)."""
    if session.get_bind().dialect.name != 'sqlite':
        session.execute(_RELEASE_LOCK, {'deployable_id': deployable_id})
    row = session.execute(_RELEASE_VIEW, {'deployable_id': deployable_id}).first()
    return None if row is None else tuple(row)


def devices_health_read(session, hostname, read_at, older_than_seconds) -> int:
    """The host's devices with a health reading were read again at ``read_at``
    (their readings unchanged): refresh ``health_read_at`` where it is older than
    ``older_than_seconds`` before it. Returns the rows changed."""
    cutoff = read_at - datetime.timedelta(seconds=older_than_seconds)
    result = session.execute(
        _DEVICES_T.update().where(_DEVICES_T.c.hostname == hostname,
                                  _DEVICES_T.c.health.is_not(None),
                                  _DEVICES_T.c.health_read_at < cutoff)
        .values(health_read_at=read_at))
    return result.rowcount


def device_health_summary(session) -> list[tuple]:
    """(type, health, hostname, count) of every device: the metrics' GROUP BY."""
    t = _DEVICES_T
    return [tuple(r) for r in session.execute(
        sa.select(t.c.type, t.c.health, t.c.hostname, sa.func.count())
        .group_by(t.c.type, t.c.health, t.c.hostname)).all()]


def devices_not_healthy(session) -> list[dict]:
    """Records of the devices whose last reading holds a condition or that are out
    of service for their health: uuid, type, hostname, device_state,
    health_fault and conditions (parsed), for the metrics. Few rows: healthy
    devices are not read."""
    t = _DEVICES_T
    rows = session.execute(
        sa.select(t.c.id, t.c.uuid, t.c.type, t.c.hostname, t.c.device_state,
                  t.c.health_fault, t.c.health_conditions)
        .where(sa.or_(t.c.health.in_(('warning', 'unhealthy')),
                      t.c.health_fault.is_not(None)))
        .order_by(t.c.id)).all()
    if not rows:
        return []
    out = []
    for r in rows:
        try:
            conditions = json.loads(r.health_conditions or '[]')
        except ValueError:
            conditions = []
        out.append({'uuid': r.uuid, 'type': r.type, 'hostname': r.hostname,
                    'device_state': r.device_state, 'health_fault': r.health_fault,
                    'conditions': [c for c in conditions if isinstance(c, dict)]})
    return out


def device_state_counts(session) -> list[tuple]:
    """(type, device_state, hostname, count) of every group of devices: what the
    metrics' device family reports."""
    return [tuple(row) for row in session.execute(
        sa.select(m.Device.type, m.Device.device_state, m.Device.hostname,
                  sa.func.count()).group_by(
            m.Device.type, m.Device.device_state, m.Device.hostname)).all()]

"""Deployables: queries on the ``deployables`` table.

Row shape (``ROW``; every function's annotation names it): ``m.Deployable`` ORM
objects, which the conductor changes in place and the bind reads. The API formats
records (``deployable_record``, ``deployable_records``: plain dicts of the same
columns), its listing of thousands read without the ORM (perf.records).
"""
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import exception
from steward.db import models as m
from steward.db import perf
from steward.db import query

ROW = m.Deployable
"""What the conductor changes and the bind reads: ORM objects."""


DEPLOYABLE_FILTERS = ('uuid', 'id', 'name', 'num_accelerators', 'device_id', 'rp_uuid',
                      'driver_name', 'parent_id', 'root_id')


def deployable_get(session, uuid) -> ROW:
    return query.one(session, sa.select(m.Deployable).where(m.Deployable.uuid == uuid),
                     exception.DeployableNotFound, 'Deployable', 'uuid', uuid)


def deployable_get_by_rp_uuid(session, rp_uuid) -> ROW:
    stmt = (sa.select(m.Deployable).where(m.Deployable.rp_uuid == rp_uuid)
            .options(orm.joinedload(m.Deployable.device)))
    return query.one(session, stmt, exception.DeployableNotFound, 'Deployable',
                     'rp_uuid', rp_uuid)


_DEPLOYABLES_BY_RP = perf.OneOrMany(
    m.Deployable.rp_uuid, 'rp_uuids',
    lambda clause: sa.select(m.Deployable, m.Device.device_state)
    .join(m.Device, m.Device.id == m.Deployable.device_id).where(clause))


def deployables_by_rp_uuids(session, rp_uuids) -> tuple[dict[str, list[ROW]], dict[int, str]]:
    """({rp_uuid: [its deployables, in device id order]}, {device id: its
    device_state as last committed}) for every one of ``rp_uuids`` in one query:
    one deployable for most providers, one per device for a pool (issue 52). The
    devices themselves are not loaded: a bind locks and re-reads them; the state
    says how it locks, see devices.devices_lock_counted. Raises for the first
    unknown one."""
    found, device_states = {}, {}
    for dep, device_state in session.execute(*_DEPLOYABLES_BY_RP(rp_uuids)):
        found.setdefault(dep.rp_uuid, []).append(dep)
        device_states[dep.device_id] = device_state
    for rp_uuid in rp_uuids:
        if rp_uuid not in found:
            raise exception.DeployableNotFound(resource='Deployable', key='rp_uuid',
                                               value=rp_uuid)
    for members in found.values():
        members.sort(key=lambda d: (d.device_id, d.id))
    return found, device_states


def deployable_list(session, filters=None) -> list[ROW]:
    stmt = sa.select(m.Deployable).where(
        *query.exact_filters(m.Deployable, filters, DEPLOYABLE_FILTERS))
    return session.execute(stmt.order_by(m.Deployable.id)).scalars().all()


def deployable_records(session, filters=None) -> list[dict]:
    """deployable_list as records (see perf.records): the API's listing."""
    table = m.Deployable.__table__
    stmt = sa.select(*perf.untyped(table.c)).where(
        *query.exact_filters(table.c, filters, DEPLOYABLE_FILTERS))
    return perf.records(session, table, stmt.order_by(table.c.id))


def deployable_record(deployable) -> dict:
    """A deployable (ROW) as the record deployable_records makes: the API's answer
    for one."""
    return perf.record(deployable)


def device_accelerators(session, device_id) -> int:
    """The accelerators of one device: the sum of its deployables'."""
    return session.execute(
        sa.select(sa.func.coalesce(sa.func.sum(m.Deployable.num_accelerators), 0))
        .where(m.Deployable.device_id == device_id)).scalar()


def deployable_get_by_id(session, deployable_id) -> ROW | None:
    return session.get(m.Deployable, deployable_id)


def deployables_move(session, deployable_ids, rp_uuid) -> None:
    """Deployables moved onto provider ``rp_uuid`` (a pool, issue 52), with their
    bound ARQs' ``device_rp_uuid``: the provider their instance's allocation is
    on now (steward/conductor/report/reshape.py moved it first)."""
    if not deployable_ids:
        return
    session.execute(sa.update(m.Deployable).where(m.Deployable.id.in_(deployable_ids))
                    .values(rp_uuid=rp_uuid))
    session.execute(sa.update(m.ExtARQ).where(m.ExtARQ.deployable_id.in_(deployable_ids))
                    .where(m.ExtARQ.device_rp_uuid.is_not(None))
                    .values(device_rp_uuid=rp_uuid))

"""Deployables: queries on the ``deployables`` table.

Row shapes (``ROW``, ``READ_ROW``; every function's annotation names them):
``m.Deployable`` ORM objects for what is changed; the bind's look-up by provider
and the API's bulk listing read plain named tuples of the same columns
(perf.row_type).
"""
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import exception
from steward.db import models as m
from steward.db import perf
from steward.db import query

ROW = m.Deployable
"""What the conductor reads to change: ORM objects."""
READ_ROW = perf.row_type(m.Deployable.__table__)
"""The bind's and the API's reads: plain named tuples."""


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


_DEPLOYABLES_T = m.Deployable.__table__
_DEPLOYABLES_BY_RP = perf.OneOrMany(_DEPLOYABLES_T.c.rp_uuid, 'rp_uuids',
                                    sa.select(*_DEPLOYABLES_T.c).where)


def deployables_by_rp_uuids(session, rp_uuids) -> dict[str, READ_ROW]:
    """{rp_uuid: deployable row} (read-only, the Deployable's columns) for every
    one of ``rp_uuids`` in one query (the device is not loaded: a bind locks and
    re-reads it); raises for the first unknown one."""
    make = READ_ROW._make
    found = {d.rp_uuid: d for d in map(make, session.connection().execute(
        *_DEPLOYABLES_BY_RP(rp_uuids)))}
    for rp_uuid in rp_uuids:
        if rp_uuid not in found:
            raise exception.DeployableNotFound(resource='Deployable', key='rp_uuid',
                                               value=rp_uuid)
    return found


def deployable_list(session, filters=None) -> list[ROW]:
    stmt = sa.select(m.Deployable).where(
        *query.exact_filters(m.Deployable, filters, DEPLOYABLE_FILTERS))
    return session.execute(stmt.order_by(m.Deployable.id)).scalars().all()


def deployable_rows(session, filters=None) -> list[READ_ROW]:
    """deployable_list as plain rows (see device_rows)."""
    table = m.Deployable.__table__
    stmt = sa.select(*perf.untyped(table.c)).where(
        *query.exact_filters(table.c, filters, DEPLOYABLE_FILTERS))
    return perf.plain_rows(session, table, stmt.order_by(table.c.id))

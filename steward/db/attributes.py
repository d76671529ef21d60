"""Deployable attributes: queries on the ``attributes`` table.

Row shape (``ROW``): ``m.Attribute`` ORM objects; ``attribute_pairs_by_deployable`` gives the
bulk listing's (key, value) pairs per deployable.
"""
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import exception
from steward.db import models as m
from steward.db import perf
from steward.db import query

ROW = m.Attribute


def attribute_pairs_by_deployable(session, deployable_ids=None) -> dict[int, list[tuple[str, str]]]:
    """{deployable_id: [(key, value), ...]} in id order, in one query; every
    deployable's when ``deployable_ids`` is None (no IN list of thousands)."""
    table = m.Attribute.__table__
    stmt = sa.select(*perf.untyped((table.c.deployable_id, table.c.key, table.c.value)))
    if deployable_ids is not None:
        if not deployable_ids:
            return {}
        stmt = stmt.where(table.c.deployable_id.in_(deployable_ids))
    result = {}
    with perf.collector_paused():
        for dep_id, key, value in session.execute(stmt.order_by(table.c.id)).all():
            result.setdefault(dep_id, []).append((key, value))
    return result


def attributes_by_deployable(session, deployable_ids) -> dict[int, list[ROW]]:
    """{deployable_id: [Attribute, ...]} in one query."""
    result = {i: [] for i in deployable_ids}
    if deployable_ids:
        stmt = (sa.select(m.Attribute).where(m.Attribute.deployable_id.in_(deployable_ids))
                .order_by(m.Attribute.id))
        for attr in session.execute(stmt).scalars():
            result[attr.deployable_id].append(attr)
    return result


def attribute_get(session, uuid) -> ROW:
    return query.one(session, sa.select(m.Attribute).where(m.Attribute.uuid == uuid),
                     exception.AttributeNotFound, 'Attribute', 'uuid', uuid)


def attribute_list(session, filters=None) -> list[ROW]:
    stmt = sa.select(m.Attribute).where(
        *query.exact_filters(m.Attribute, filters, ('uuid', 'deployable_id', 'key', 'value')))
    return session.execute(stmt.order_by(m.Attribute.id)).scalars().all()


def attribute_create(session, deployable_id, key, value) -> ROW:
    if session.get(m.Deployable, deployable_id) is None:
        raise exception.DeployableNotFound(resource='Deployable', key='id',
                                           value=deployable_id)
    attr = m.Attribute(uuid=uuidutils.generate_uuid(), deployable_id=deployable_id,
                       key=key, value=value)
    session.add(attr)
    session.flush()
    return attr


def attribute_delete(session, uuid) -> None:
    session.delete(attribute_get(session, uuid))


def pooled_resource_classes(session) -> set[str]:
    """The resource classes some pool offers (issue 52): the ``rc`` of every
    deployable that has a ``pool`` attribute."""
    pool = orm.aliased(m.Attribute)
    rc = orm.aliased(m.Attribute)
    return set(session.execute(
        sa.select(rc.value).distinct()
        .join(pool, sa.and_(pool.deployable_id == rc.deployable_id, pool.key == 'pool'))
        .where(rc.key == 'rc')).scalars())

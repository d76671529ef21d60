"""Attach handles: taking and freeing them, the bind's compare-and-swap.

Row shape (``ROW``): a read-only Core row (id, uuid, attach_type, attach_info) of
the handle taken; loading an ORM entity from RETURNING was a quarter of a bind.
"""
import sqlalchemy as sa

from steward.common import exception
from steward.db import models as m

ROW = sa.engine.Row
"""The handle taken: a read-only Core row (id, uuid, attach_type, attach_info)."""


# The hot path's statements are built once: building a statement and computing its
# cache key cost more than SQLite takes to run it.
_HANDLES = m.AttachHandle.__table__
# Table columns, not the mapped class's: a statement naming mapped attributes runs
# through the ORM's bulk-update machinery, which cost more than the UPDATE itself.
# The handle comes back as a read-only row of these, not an ORM object: loading an
# entity from RETURNING was a quarter of a bind.
_HANDLE_COLUMNS = (_HANDLES.c.id, _HANDLES.c.uuid, _HANDLES.c.attach_type,
                   _HANDLES.c.attach_info)


def _free_handles(*columns):
    return sa.select(*columns).where(_HANDLES.c.deployable_id == sa.bindparam('dep_id'),
                                     _HANDLES.c.in_use.is_(False))


def _first_free(*columns, skip_locked=None):
    """The free handle of lowest id; ``skip_locked`` True or False: locked
    (FOR UPDATE), past or waiting for the ones others hold; None: not locked."""
    first = _free_handles(*columns).order_by(_HANDLES.c.id).limit(1)
    if skip_locked is None:
        return first
    return first.with_for_update(skip_locked=skip_locked)


# Two ways of taking a free handle, tried in this order (``skip_locked``): past the
# free handles other transactions are taking (SKIP LOCKED: binds to one device
# under its share lock, device_ops.lock_for_bind, each take the next free one at
# once instead of queueing on the first), then, when every free handle was
# locked, waiting for them: such a handle is one another bind, a report or a
# release is changing, and it may be free once that commits (or rolls back).
_TAKE_FREE_HANDLE = {skip: (
    sa.update(_HANDLES)
    .where(_HANDLES.c.id == _first_free(_HANDLES.c.id,
                                        skip_locked=True if skip else None)
           .scalar_subquery(), _HANDLES.c.in_use.is_(False))
    .values(in_use=True).returning(*_HANDLE_COLUMNS)) for skip in (True, False)}
_ANY_FREE_HANDLE = _free_handles(_HANDLES.c.id).limit(1)
# MariaDB and MySQL have no UPDATE ... RETURNING, and refuse a subquery on the
# table an UPDATE changes (1093): the free handle is locked first (FOR UPDATE, a
# read of the latest committed row, not the transaction's snapshot), then taken
# by id.
_LOCK_FREE_HANDLE = {skip: _first_free(*_HANDLE_COLUMNS, skip_locked=skip)
                     for skip in (True, False)}
_TAKE_HANDLE = (sa.update(_HANDLES)
                .where(_HANDLES.c.id == sa.bindparam('handle_id'),
                       _HANDLES.c.in_use.is_(False))
                .values(in_use=True))


def attach_handle_allocate(session, deployable) -> ROW:
    """Take one free handle of ``deployable`` with one compare-and-swap
    ``UPDATE ... WHERE in_use = false RETURNING``, so two binds in different
    processes (or on PostgreSQL, different transactions) can never get the same
    handle: the loser updates nothing and retries with the next free one. On
    MariaDB/MySQL the same swap follows a locking read (above)."""
    params = {'dep_id': deployable.id}
    conn = session.connection()
    take = _take_locked if conn.dialect.name == 'mysql' else _take_returning
    for _ in range(16):
        handle = take(conn, params, True) or take(conn, params, False)
        if handle is not None:
            return handle
        # Nothing taken: none free, or another transaction took the one we saw.
        if session.execute(_ANY_FREE_HANDLE, params).first() is None:
            break
    raise exception.NoFreeAttachHandle(deployable=deployable.name)


def _take_returning(conn, params, skip_locked):
    return conn.execute(_TAKE_FREE_HANDLE[skip_locked], params).first()


def _take_locked(conn, params, skip_locked):
    handle = conn.execute(_LOCK_FREE_HANDLE[skip_locked], params).first()
    if handle is None:
        return None
    taken = conn.execute(_TAKE_HANDLE, {'handle_id': handle.id}).rowcount
    return handle if taken == 1 else None


# A handle imported from Cyborg in use takes the attach info Steward's driver
# reports for it (discovered_as) once released: the next tenant gets Steward's.
_RELEASE_HANDLE = (sa.update(m.AttachHandle.__table__)
                   .where(m.AttachHandle.__table__.c.id == sa.bindparam('handle_id'))
                   .values(in_use=False,
                           attach_info=sa.func.coalesce(
                               m.AttachHandle.__table__.c.discovered_as,
                               m.AttachHandle.__table__.c.attach_info),
                           discovered_as=None))


def attach_handle_release(session, handle_id) -> None:
    session.execute(_RELEASE_HANDLE, {'handle_id': handle_id})

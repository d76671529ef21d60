"""Queries. Every filter runs in SQL on an indexed column and related rows come in
the same query (upstream loaded whole tables and filtered in Python, one query per
ARQ for its profile, handle and deployable).

Functions take the session from ``Database.reader()``/``writer()``
(steward/db/session.py); they never commit. Storage rows do not leave this layer's
callers unconverted: ``*_record()`` turns them into plain dicts the API views and
the RPC layer can carry.
"""
import collections
import contextlib
import gc
import json
import threading
import types

from oslo_db import exception as db_exc
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import exception
from steward.common import states
from steward.db import models as m


def _one(session, stmt, exc, resource, key, value):
    row = session.execute(stmt).unique().scalar_one_or_none()
    if row is None:
        raise exc(resource=resource, key=key, value=value)
    return row


def _exact_filters(model, filters, allowed):
    """``model``: a mapped class, or a table's columns (``Table.c``). A value the
    column cannot hold (an unknown enum value, an integer beyond 64 bits, a NUL
    character) matches nothing, as upstream's unknown ``?type=`` does, instead of
    reaching the driver: SQLAlchemy's enum type raises LookupError on it, SQLite
    OverflowError, PostgreSQL refuses NUL in a string."""
    clauses = []
    for key, value in (filters or {}).items():
        if key not in allowed or value is None:
            continue
        column = getattr(model, key)
        clauses.append(column == value if _storable(column, value) else sa.false())
    return clauses


_INT64 = (-2 ** 63, 2 ** 63 - 1)


def _storable(column, value):
    kind = column.type
    if isinstance(value, int) and not isinstance(value, bool):
        return _INT64[0] <= value <= _INT64[1]
    if isinstance(value, str):
        if '\x00' in value:
            return False
        if isinstance(kind, sa.Enum):
            return value in kind.enums
        if isinstance(kind, sa.Integer):
            return False
    return True


class OneOrMany:
    """A statement filtered on a column taking one value of a list, built twice:
    ``column = :name`` for one value (Nova's case: one ARQ, one instance, one
    device) and ``column IN (:name)`` for several. SQLAlchemy renders an
    expanding IN into new SQL at every execution, a sixth of such a query's time.
    ``build(clause)`` makes the statement from the filter clause on ``column``.
    Calling it with the values gives (statement, parameters)."""

    def __init__(self, column, name, build):
        self.name = name
        self.one = build(column == sa.bindparam(name))
        self.many = build(column.in_(sa.bindparam(name, expanding=True)))

    def __call__(self, values, **params):
        values = list(values)
        if len(values) == 1:
            return self.one, dict(params, **{self.name: values[0]})
        return self.many, dict(params, **{self.name: values})


# --- devices ----------------------------------------------------------------------
DEVICE_FILTERS = ('uuid', 'id', 'type', 'vendor', 'model', 'hostname', 'status',
                  'device_state')


def device_get(session, uuid):
    return _one(session, sa.select(m.Device).where(m.Device.uuid == uuid),
                exception.DeviceNotFound, 'Device', 'uuid', uuid)


def device_get_by_id(session, device_id):
    return session.get(m.Device, device_id)


def device_list(session, filters=None):
    stmt = sa.select(m.Device).where(*_exact_filters(m.Device, filters, DEVICE_FILTERS))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()


_ROW_TYPES = {}


def _untyped(columns):
    """``columns`` selected without SQLAlchemy's per-value result processing (an
    enum check, SQLite's datetime parsing): at ten thousand rows that processing
    cost more than the query. A DateTime column then comes back as SQLite's text
    (``timestamp()`` reads both) or PostgreSQL's datetime."""
    return [sa.type_coerce(c, sa.types.NullType()).label(c.key) for c in columns]


_gc_lock = threading.Lock()
_gc_pausers = 0


@contextlib.contextmanager
def _collector_paused():
    """Bulk reads make tens of thousands of tuples in a burst; each burst set off
    several collections that walk every long-lived object (the listing caches
    among them) and cost more than the read itself. Paused for the burst only,
    and counted, since requests overlap and the switch is process-wide."""
    global _gc_pausers
    with _gc_lock:
        _gc_pausers += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if not _gc_pausers:
                gc.enable()


def _plain_rows(session, table, stmt):
    """The rows of ``stmt`` (every column of ``table``, see _untyped) as named
    tuples: read-only, attribute access like the models, and ~20x cheaper per
    attribute than ORM objects or SQLAlchemy rows (a listing of ten thousand
    devices spent most of its time there)."""
    row_type = _ROW_TYPES.get(table.name)
    if row_type is None:
        row_type = _ROW_TYPES[table.name] = collections.namedtuple(
            f'{table.name}_row', [c.key for c in table.c])
    make = row_type._make
    with _collector_paused():
        return [make(r) for r in session.execute(stmt).all()]


def device_rows(session, filters=None):
    """device_list as plain rows (see _plain_rows)."""
    table = m.Device.__table__
    stmt = sa.select(*_untyped(table.c)).where(
        *_exact_filters(table.c, filters, DEVICE_FILTERS))
    return _plain_rows(session, table, stmt.order_by(table.c.id))


def device_has_active_arq(session, device_id):
    stmt = (sa.select(sa.func.count()).select_from(m.ExtARQ)
            .join(m.Deployable, m.ExtARQ.deployable_id == m.Deployable.id)
            .where(m.Deployable.device_id == device_id,
                   m.ExtARQ.state.in_(states.ARQ_HOLDS_HANDLE)))
    return session.execute(stmt).scalar() > 0


def device_handles_in_use(session, device_id):
    stmt = (sa.select(sa.func.count()).select_from(m.AttachHandle)
            .join(m.Deployable, m.AttachHandle.deployable_id == m.Deployable.id)
            .where(m.Deployable.device_id == device_id, m.AttachHandle.in_use.is_(True)))
    return session.execute(stmt).scalar()


# --- deployables ------------------------------------------------------------------
DEPLOYABLE_FILTERS = ('uuid', 'id', 'name', 'num_accelerators', 'device_id', 'rp_uuid',
                      'driver_name', 'parent_id', 'root_id')


def deployable_get(session, uuid):
    return _one(session, sa.select(m.Deployable).where(m.Deployable.uuid == uuid),
                exception.DeployableNotFound, 'Deployable', 'uuid', uuid)


def deployable_get_by_rp_uuid(session, rp_uuid):
    stmt = (sa.select(m.Deployable).where(m.Deployable.rp_uuid == rp_uuid)
            .options(orm.joinedload(m.Deployable.device)))
    return _one(session, stmt, exception.DeployableNotFound, 'Deployable',
                'rp_uuid', rp_uuid)


_DEPLOYABLES_T = m.Deployable.__table__
_DEPLOYABLES_BY_RP = OneOrMany(_DEPLOYABLES_T.c.rp_uuid, 'rp_uuids',
                               sa.select(*_DEPLOYABLES_T.c).where)


def deployables_by_rp_uuids(session, rp_uuids):
    """{rp_uuid: deployable row} (read-only, the Deployable's columns) for every
    one of ``rp_uuids`` in one query (the device is not loaded: a bind locks and
    re-reads it); raises for the first unknown one."""
    found = {d.rp_uuid: d for d in session.connection().execute(
        *_DEPLOYABLES_BY_RP(rp_uuids))}
    for rp_uuid in rp_uuids:
        if rp_uuid not in found:
            raise exception.DeployableNotFound(resource='Deployable', key='rp_uuid',
                                               value=rp_uuid)
    return found


def deployable_list(session, filters=None):
    stmt = sa.select(m.Deployable).where(
        *_exact_filters(m.Deployable, filters, DEPLOYABLE_FILTERS))
    return session.execute(stmt.order_by(m.Deployable.id)).scalars().all()


def deployable_rows(session, filters=None):
    """deployable_list as plain rows (see device_rows)."""
    table = m.Deployable.__table__
    stmt = sa.select(*_untyped(table.c)).where(
        *_exact_filters(table.c, filters, DEPLOYABLE_FILTERS))
    return _plain_rows(session, table, stmt.order_by(table.c.id))


def attribute_pairs_by_deployable(session, deployable_ids=None):
    """{deployable_id: [(key, value), ...]} in id order, in one query; every
    deployable's when ``deployable_ids`` is None (no IN list of thousands)."""
    table = m.Attribute.__table__
    stmt = sa.select(*_untyped((table.c.deployable_id, table.c.key, table.c.value)))
    if deployable_ids is not None:
        if not deployable_ids:
            return {}
        stmt = stmt.where(table.c.deployable_id.in_(deployable_ids))
    result = {}
    with _collector_paused():
        for dep_id, key, value in session.execute(stmt.order_by(table.c.id)).all():
            result.setdefault(dep_id, []).append((key, value))
    return result


def attributes_by_deployable(session, deployable_ids):
    """{deployable_id: [Attribute, ...]} in one query."""
    result = {i: [] for i in deployable_ids}
    if deployable_ids:
        stmt = (sa.select(m.Attribute).where(m.Attribute.deployable_id.in_(deployable_ids))
                .order_by(m.Attribute.id))
        for attr in session.execute(stmt).scalars():
            result[attr.deployable_id].append(attr)
    return result


# --- attributes -------------------------------------------------------------------
def attribute_get(session, uuid):
    return _one(session, sa.select(m.Attribute).where(m.Attribute.uuid == uuid),
                exception.AttributeNotFound, 'Attribute', 'uuid', uuid)


def attribute_list(session, filters=None):
    stmt = sa.select(m.Attribute).where(
        *_exact_filters(m.Attribute, filters, ('uuid', 'deployable_id', 'key', 'value')))
    return session.execute(stmt.order_by(m.Attribute.id)).scalars().all()


def attribute_create(session, deployable_id, key, value):
    if session.get(m.Deployable, deployable_id) is None:
        raise exception.DeployableNotFound(resource='Deployable', key='id',
                                           value=deployable_id)
    attr = m.Attribute(uuid=uuidutils.generate_uuid(), deployable_id=deployable_id,
                       key=key, value=value)
    session.add(attr)
    session.flush()
    return attr


def attribute_delete(session, uuid):
    session.delete(attribute_get(session, uuid))


# --- device profiles --------------------------------------------------------------
_PROFILE_BY = {key: sa.select(m.DeviceProfile).where(
    getattr(m.DeviceProfile, key) == sa.bindparam('value')) for key in ('uuid', 'name')}


def device_profile_get(session, uuid=None, name=None):
    key, value = ('uuid', uuid) if uuid is not None else ('name', name)
    row = session.execute(_PROFILE_BY[key], {'value': value}).scalar_one_or_none()
    if row is None:
        raise exception.DeviceProfileNotFound(resource='Device Profile', key=key,
                                              value=value)
    return row


_PROFILES = sa.select(*m.DeviceProfile.__table__.c).order_by(m.DeviceProfile.__table__.c.id)
_PROFILES_NAMED = OneOrMany(m.DeviceProfile.__table__.c.name, 'names', _PROFILES.where)


def device_profile_list(session, names=None):
    """Profiles as read-only rows (attribute access like the model), optionally
    only those of ``names``: Nova's ``?name=`` before every boot."""
    if names is None:
        return session.execute(_PROFILES).all()
    return session.execute(*_PROFILES_NAMED(names)).all()


def device_profile_create(session, name, groups, description=None, uuid=None):
    uuid = uuid or uuidutils.generate_uuid()
    clash = session.execute(
        sa.select(m.DeviceProfile.name, m.DeviceProfile.uuid).where(
            sa.or_(m.DeviceProfile.name == name, m.DeviceProfile.uuid == uuid))).first()
    if clash is not None:
        if clash.name == name:
            raise exception.DuplicateDeviceProfileName(name=name)
        raise exception.DuplicateUUID(resource='device profile', uuid=uuid)
    dp = m.DeviceProfile(uuid=uuid, name=name, description=description,
                         profile_json=json.dumps({'groups': groups}))
    session.add(dp)
    try:
        session.flush()
    except db_exc.DBDuplicateEntry:
        # Lost a race with a concurrent create of the same name.
        raise exception.DuplicateDeviceProfileName(name=name)
    return dp


def device_profile_delete(session, dp):
    # The FK is RESTRICT but SQLite enforces it only with foreign_keys=ON and the
    # old code path deleted anyway, orphaning ARQs (upstream defect): check first.
    count = session.execute(
        sa.select(sa.func.count()).select_from(m.ExtARQ)
        .where(m.ExtARQ.device_profile_id == dp.id)).scalar()
    if count:
        raise exception.DeviceProfileInUse(name=dp.name, count=count)
    session.delete(dp)


def device_profile_groups(dp):
    return json.loads(dp.profile_json).get('groups', [])


# --- attach handles ---------------------------------------------------------------
# The hot path's statements are built once: building a statement and computing its
# cache key cost more than SQLite takes to run it.
_HANDLES = m.AttachHandle.__table__
# Table columns, not the mapped class's: a statement naming mapped attributes runs
# through the ORM's bulk-update machinery, which cost more than the UPDATE itself.
_FREE_HANDLE_ID = (sa.select(_HANDLES.c.id)
                   .where(_HANDLES.c.deployable_id == sa.bindparam('dep_id'),
                          _HANDLES.c.in_use.is_(False))
                   .order_by(_HANDLES.c.id).limit(1).scalar_subquery())
# The handle comes back as a read-only row (id, uuid, attach_type, attach_info), not
# an ORM object: loading an entity from RETURNING was a quarter of a bind.
_TAKE_FREE_HANDLE = (sa.update(_HANDLES)
                     .where(_HANDLES.c.id == _FREE_HANDLE_ID, _HANDLES.c.in_use.is_(False))
                     .values(in_use=True)
                     .returning(_HANDLES.c.id, _HANDLES.c.uuid, _HANDLES.c.attach_type,
                                _HANDLES.c.attach_info))
_ANY_FREE_HANDLE = (sa.select(_HANDLES.c.id)
                    .where(_HANDLES.c.deployable_id == sa.bindparam('dep_id'),
                           _HANDLES.c.in_use.is_(False)).limit(1))
# MariaDB and MySQL have no UPDATE ... RETURNING, and refuse a subquery on the
# table an UPDATE changes (1093): the free handle is locked first (FOR UPDATE, a
# read of the latest committed row, not the transaction's snapshot), then taken
# by id. Not SKIP LOCKED: the bind holds its device's row lock already
# (device_ops.lock_devices_counted), so a handle locked by someone else is one a
# report or a release is changing, and it may be free once that commits.
_LOCK_FREE_HANDLE = (sa.select(_HANDLES.c.id, _HANDLES.c.uuid, _HANDLES.c.attach_type,
                               _HANDLES.c.attach_info)
                     .where(_HANDLES.c.deployable_id == sa.bindparam('dep_id'),
                            _HANDLES.c.in_use.is_(False))
                     .order_by(_HANDLES.c.id).limit(1).with_for_update())
_TAKE_HANDLE = (sa.update(_HANDLES)
                .where(_HANDLES.c.id == sa.bindparam('handle_id'),
                       _HANDLES.c.in_use.is_(False))
                .values(in_use=True))


def attach_handle_allocate(session, deployable):
    """Take one free handle of ``deployable`` with one compare-and-swap
    ``UPDATE ... WHERE in_use = false RETURNING``, so two binds in different
    processes (or on PostgreSQL, different transactions) can never get the same
    handle: the loser updates nothing and retries with the next free one. On
    MariaDB/MySQL the same swap follows a locking read (above)."""
    params = {'dep_id': deployable.id}
    conn = session.connection()
    take = _take_locked if conn.dialect.name == 'mysql' else _take_returning
    for _ in range(16):
        handle = take(conn, params)
        if handle is not None:
            return handle
        # Nothing taken: none free, or another transaction took the one we saw.
        if session.execute(_ANY_FREE_HANDLE, params).first() is None:
            break
    raise exception.NoFreeAttachHandle(deployable=deployable.name)


def _take_returning(conn, params):
    return conn.execute(_TAKE_FREE_HANDLE, params).first()


def _take_locked(conn, params):
    handle = conn.execute(_LOCK_FREE_HANDLE, params).first()
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


def attach_handle_release(session, handle_id):
    session.execute(_RELEASE_HANDLE, {'handle_id': handle_id})


# --- accelerator requests ---------------------------------------------------------
class ArqRow(types.SimpleNamespace):
    """An ARQ as the conductor reads it to change it: its columns and its
    profile's name (``profile_name``), a plain object that ``states.advance``
    updates in place. Loading ORM entities with their relationships was the
    biggest cost of a bind and a delete, and nothing here needs an identity map."""


_ARQ_T, _PROFILE_T = m.ExtARQ.__table__, m.DeviceProfile.__table__
_DEVICES_T = m.Device.__table__
_ARQ_ROWS = (sa.select(*_ARQ_T.c, _PROFILE_T.c.name.label('profile_name'))
             .select_from(_ARQ_T.join(_PROFILE_T,
                                      _PROFILE_T.c.id == _ARQ_T.c.device_profile_id)))
# Nova's calls (by uuid, by instance), built once, with and without a project scope.
_ARQS_BY_UUID = OneOrMany(_ARQ_T.c.uuid, 'uuids', _ARQ_ROWS.where)
_ARQS_BY_UUID_SCOPED = OneOrMany(
    _ARQ_T.c.uuid, 'uuids',
    lambda clause: _ARQ_ROWS.where(clause, _ARQ_T.c.project_id == sa.bindparam('project_id')))
_ARQS_BY_INSTANCE = (_ARQ_ROWS.where(_ARQ_T.c.instance_uuid == sa.bindparam('instance'))
                     .order_by(_ARQ_T.c.id))
_ARQS_BY_INSTANCE_SCOPED = (
    _ARQ_ROWS.where(_ARQ_T.c.instance_uuid == sa.bindparam('instance'),
                    _ARQ_T.c.project_id == sa.bindparam('project_id'))
    .order_by(_ARQ_T.c.id))


def _arq_rows(result):
    return [ArqRow(**row._mapping) for row in result]


def arq_get_many(session, uuids, project_id=None):
    """ARQs (ArqRow) by uuid, in the order asked; raises for the first missing one."""
    stmt, params = _ARQS_BY_UUID(uuids) if project_id is None else \
        _ARQS_BY_UUID_SCOPED(uuids, project_id=project_id)
    by_uuid = {r.uuid: r for r in _arq_rows(session.execute(stmt, params))}
    for uuid in uuids:
        if uuid not in by_uuid:
            raise exception.ARQNotFound(resource='Accelerator request', key='uuid',
                                        value=uuid)
    return [by_uuid[u] for u in uuids]


def arq_reread(session, arq_id):
    """The ARQ (ArqRow, without its profile's name) as last committed, locked, or
    None once deleted. A locking read: under MariaDB's repeatable read a plain
    SELECT would still show the transaction's snapshot."""
    row = session.execute(sa.select(*_ARQ_T.c).where(_ARQ_T.c.id == arq_id)
                          .with_for_update()).first()
    return None if row is None else ArqRow(profile_name=None, **row._mapping)


def arq_list(session, project_id=None, instance_uuid=None, states_in=None):
    """ARQs (ArqRow) in id order, filtered by project, instance and states."""
    if instance_uuid is not None and states_in is None:
        stmt, params = (_ARQS_BY_INSTANCE, {'instance': instance_uuid}) \
            if project_id is None else (_ARQS_BY_INSTANCE_SCOPED, {
                'instance': instance_uuid, 'project_id': project_id})
        return _arq_rows(session.execute(stmt, params))
    return _arq_rows(session.execute(
        _arq_filtered(_ARQ_ROWS, project_id, instance_uuid, states_in)))


def _arq_filtered(stmt, project_id, instance_uuid, states_in):
    """``stmt`` (a select of ARQs) narrowed to what arq_list takes, in id order."""
    if project_id is not None:
        stmt = stmt.where(_ARQ_T.c.project_id == project_id)
    if instance_uuid is not None:
        stmt = stmt.where(_ARQ_T.c.instance_uuid == instance_uuid)
    if states_in is not None:
        stmt = stmt.where(_ARQ_T.c.state.in_(states_in))
    return stmt.order_by(_ARQ_T.c.id)


def arq_bound_instances(session):
    """[(instance_uuid, oldest updated_at)] of the instances holding Bound ARQs,
    the least recently updated first."""
    oldest = sa.func.min(sa.func.coalesce(m.ExtARQ.updated_at, m.ExtARQ.created_at))
    stmt = (sa.select(m.ExtARQ.instance_uuid, oldest)
            .where(m.ExtARQ.state == states.ARQ_BOUND,
                   m.ExtARQ.instance_uuid.isnot(None))
            .group_by(m.ExtARQ.instance_uuid)
            .order_by(oldest, m.ExtARQ.instance_uuid))
    return [tuple(row) for row in session.execute(stmt).all()]


def _instances_with_binding(excluded):
    return OneOrMany(_ARQ_T.c.instance_uuid, 'instances', lambda clause: sa.select(
        _ARQ_T.c.instance_uuid, _DEVICES_T.c.hostname).distinct()
        .select_from(_ARQ_T.outerjoin(
            _DEPLOYABLES_T, _DEPLOYABLES_T.c.id == _ARQ_T.c.deployable_id)
            .outerjoin(_DEVICES_T, _DEVICES_T.c.id == _DEPLOYABLES_T.c.device_id))
        .where(clause, excluded))


# By how many ARQs are excluded: one (a bind of one ARQ), or any other number.
_INSTANCES_WITH_BINDING = {
    True: _instances_with_binding(_ARQ_T.c.id != sa.bindparam('exclude')),
    False: _instances_with_binding(
        _ARQ_T.c.id.notin_(sa.bindparam('exclude', expanding=True)))}


def arq_bound_hosts(session, instance_uuid):
    """[(ARQ uuid, its device's agent host)] of an instance's Bound ARQs, in id
    order: where each set of a moving instance is (the orphan check)."""
    stmt = (sa.select(_ARQ_T.c.uuid, _DEVICES_T.c.hostname)
            .select_from(_ARQ_T.join(_HANDLES, _HANDLES.c.id == _ARQ_T.c.attach_handle_id)
                         .join(_DEPLOYABLES_T, _DEPLOYABLES_T.c.id == _HANDLES.c.deployable_id)
                         .join(_DEVICES_T, _DEVICES_T.c.id == _DEPLOYABLES_T.c.device_id))
            .where(_ARQ_T.c.instance_uuid == instance_uuid,
                   _ARQ_T.c.state == states.ARQ_BOUND)
            .order_by(_ARQ_T.c.id))
    return [tuple(row) for row in session.execute(stmt)]


def device_host_known(session, hostname):
    """Does any agent report a device on ``hostname``?"""
    return session.execute(sa.select(_DEVICES_T.c.id).where(
        _DEVICES_T.c.hostname == hostname).limit(1)).first() is not None


def arq_instances_with_binding(session, instance_uuids, exclude_ids=()):
    """Which of ``instance_uuids`` already have an ARQ (other than
    ``exclude_ids``) bound to them, in one query: {instance: {device hosts}},
    the agent host of each such ARQ's device (None when it has no deployable
    any more)."""
    # An empty expanding NOT IN is valid SQL in SQLAlchemy (it renders an
    # always-true test), but no ARQ has id 0: keep the statement one shape.
    exclude = list(exclude_ids) or [0]
    one = len(exclude) == 1
    stmt, params = _INSTANCES_WITH_BINDING[one](
        instance_uuids, exclude=exclude[0] if one else exclude)
    found = {}
    for inst, host in session.execute(stmt, params):
        found.setdefault(inst, set()).add(host)
    return found


def arq_create(session, dp, group_id, project_id):
    """One new ARQ as an ORM object (arqs_create is the API's bulk path)."""
    arq = m.ExtARQ(uuid=uuidutils.generate_uuid(), project_id=project_id,
                   state=states.ARQ_INITIAL, device_profile_id=dp.id,
                   device_profile_group_id=group_id)
    session.add(arq)
    arq.device_profile = dp
    arq.attach_handle = None
    return arq


def arqs_create(session, dp, group_ids, project_id):
    """New ARQs of profile ``dp``, one per entry of ``group_ids`` (the profile
    group each serves), in one INSERT (no ORM unit of work: it cost more than
    the INSERT). Returns their records (arq_record)."""
    now = timeutils.utcnow()
    rows = [{'uuid': uuidutils.generate_uuid(), 'project_id': project_id,
             'state': states.ARQ_INITIAL, 'device_profile_id': dp.id,
             'device_profile_group_id': group_id, 'created_at': now}
            for group_id in group_ids]
    if rows:
        session.execute(sa.insert(m.ExtARQ.__table__), rows)
    return [arq_record(ArqRow(
        hostname=None, device_rp_uuid=None, instance_uuid=None, updated_at=None,
        profile_name=dp.name, **row)) for row in rows]


def arq_record(arq, handle=None, device_type=None):
    """Storage-neutral view of an ARQ (the API formats it per microversion).
    ``arq``: an ArqRow (its columns and ``profile_name``); ``handle``: the attach
    handle row it holds, when Bound; ``device_type``: the type of that handle's
    device (how it may move, API 2.7)."""
    if handle is None or arq.state != states.ARQ_BOUND:
        return _record(arq, '', None, None)
    return _record(arq, handle.attach_type, handle.uuid, handle.attach_info, device_type)


def _record(arq, handle_type, handle_uuid, handle_info, device_type=None):
    return {
        'uuid': arq.uuid, 'state': arq.state,
        'device_profile_name': arq.profile_name,
        'device_profile_group_id': arq.device_profile_group_id,
        'hostname': arq.hostname, 'device_rp_uuid': arq.device_rp_uuid,
        'instance_uuid': arq.instance_uuid, 'project_id': arq.project_id,
        'attach_handle_type': handle_type,
        'attach_handle_uuid': handle_uuid,
        'attach_handle_info': json.loads(handle_info) if handle_info else {},
        'created_at': timestamp(arq.created_at), 'updated_at': timestamp(arq.updated_at),
        # Internal (the API's views copy only the wire fields): NVME devices
        # refuse every move (steward.common.moves).
        'device_type': device_type,
    }


# What an ARQ's record is made of, in one Core query (an ArqRow's join and its
# handle): the API's reads need no ORM objects, and loading them (with their
# profile and handle) was most of a read.
_ARQ_RECORD_SELECT = (
    _ARQ_ROWS.add_columns(_HANDLES.c.attach_type.label('handle_type'),
                          _HANDLES.c.uuid.label('handle_uuid'),
                          _HANDLES.c.attach_info.label('handle_info'),
                          _DEVICES_T.c.type.label('handle_device_type'))
    .outerjoin(_HANDLES, _HANDLES.c.id == _ARQ_T.c.attach_handle_id)
    .outerjoin(_DEPLOYABLES_T, _DEPLOYABLES_T.c.id == _HANDLES.c.deployable_id)
    .outerjoin(_DEVICES_T, _DEVICES_T.c.id == _DEPLOYABLES_T.c.device_id))
_RECORDS_BY_INSTANCE = (_ARQ_RECORD_SELECT
                        .where(_ARQ_T.c.instance_uuid == sa.bindparam('instance'))
                        .order_by(_ARQ_T.c.id))


def _records(rows):
    bound = states.ARQ_BOUND
    return [_record(r, r.handle_type or '', r.handle_uuid, r.handle_info,
                    r.handle_device_type)
            if r.state == bound else _record(r, '', None, None) for r in rows]


def arq_records(session, project_id=None, instance_uuid=None, states_in=None):
    """arq_list's ARQs as records (arq_record), read without the ORM."""
    if instance_uuid is not None and states_in is None and project_id is None:
        return _records(session.execute(_RECORDS_BY_INSTANCE,
                                        {'instance': instance_uuid}))
    return _records(session.execute(
        _arq_filtered(_ARQ_RECORD_SELECT, project_id, instance_uuid, states_in)))


def arq_get_record(session, uuid, project_id=None):
    """One ARQ's record (arq_record); ARQNotFound also for another project's."""
    stmt = _ARQ_RECORD_SELECT.where(_ARQ_T.c.uuid == uuid)
    if project_id is not None:
        stmt = stmt.where(_ARQ_T.c.project_id == project_id)
    records = _records(session.execute(stmt))
    if not records:
        raise exception.ARQNotFound(resource='Accelerator request', key='uuid', value=uuid)
    return records[0]


def timestamp(value):
    """Rows store naive UTC; the wire carries ISO 8601 with an explicit offset.
    ``value``: a datetime, or SQLite's stored text of one ('YYYY-MM-DD HH:MM:SS'
    and maybe a fraction) as untyped reads (_untyped) return it."""
    if value is None:
        return None
    if isinstance(value, str):
        return f'{value[:10]}T{value[11:19]}+00:00'
    return value.isoformat(timespec='seconds') + '+00:00'


def arq_list_by_uuids_in_state(session, uuids, state):
    if not uuids:
        return []
    # Two conductors may finish the same deletes (reconciliation): each takes the
    # rows the other has not locked instead of both deleting one row.
    stmt = (sa.select(*_ARQ_T.c).where(_ARQ_T.c.uuid.in_(uuids), _ARQ_T.c.state == state)
            .with_for_update(skip_locked=True))
    return [ArqRow(profile_name=None, **row._mapping)
            for row in session.execute(stmt.order_by(_ARQ_T.c.id))]


# --- erase records (device cleanup attempts) ----------------------------------------
ERASE_RECORD_COLUMNS = ('hostname', 'pci_address', 'trigger', 'status', 'action',
                        'assurance_level', 'serial', 'model', 'firmware', 'started_at',
                        'finished_at', 'phase', 'progress', 'progress_detail', 'sstat',
                        'sstat_text', 'verification', 'verification_detail',
                        'error_code', 'error_message')


def erase_values(values):
    """Column values of an erase record as stored (JSON columns encoded), for
    erase_record_create/update and states.advance(..., values=)."""
    out = {k: v for k, v in values.items() if k in ERASE_RECORD_COLUMNS}
    if 'capabilities' in values:
        out['capabilities'] = json.dumps(values['capabilities'], sort_keys=True)
    if 'details' in values:
        out['details'] = json.dumps(values['details'], sort_keys=True)
    if 'capability_decision' in values:
        out['capability_decision'] = json.dumps(values['capability_decision'],
                                                sort_keys=True)
    return out


def erase_record_create(session, device_uuid, **values):
    states.check_created('erase', values.get('status'))
    rec = m.EraseRecord(uuid=uuidutils.generate_uuid(), device_uuid=device_uuid,
                        **erase_values(values))
    session.add(rec)
    session.flush()
    return rec


def erase_record_get(session, uuid):
    return _one(session, sa.select(m.EraseRecord).where(m.EraseRecord.uuid == uuid),
                exception.ResourceNotFound, 'Erase record', 'uuid', uuid)


def erase_record_update(session, uuid, **values):
    """Every column but ``status``, which only states.advance() changes."""
    if 'status' in values:
        raise ValueError('an erase record\'s status changes through states.advance()')
    rec = erase_record_get(session, uuid)
    for key, value in erase_values(values).items():
        setattr(rec, key, value)
    return rec


def erase_record_list(session, device_uuid, limit=None, status=None):
    """Newest first."""
    stmt = sa.select(m.EraseRecord).where(m.EraseRecord.device_uuid == device_uuid)
    if status is not None:
        stmt = stmt.where(m.EraseRecord.status == status)
    stmt = stmt.order_by(m.EraseRecord.id.desc())
    if limit:
        stmt = stmt.limit(limit)
    return session.execute(stmt).scalars().all()


def erase_record_record(rec):
    """Storage-neutral view of an erase record."""
    out = {'uuid': rec.uuid, 'device_uuid': rec.device_uuid}
    for key in ERASE_RECORD_COLUMNS:
        out[key] = getattr(rec, key)
    out['started_at'] = timestamp(rec.started_at)
    out['finished_at'] = timestamp(rec.finished_at)
    out['capabilities'] = json.loads(rec.capabilities) if rec.capabilities else None
    out['details'] = json.loads(rec.details) if rec.details else {}
    out['capability_decision'] = (json.loads(rec.capability_decision)
                                  if rec.capability_decision else None)
    out['created_at'] = timestamp(rec.created_at)
    out['updated_at'] = timestamp(rec.updated_at)
    return out


def devices_in_states(session, hostname, device_states):
    stmt = sa.select(m.Device).where(m.Device.hostname == hostname,
                                     m.Device.device_state.in_(device_states))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()


def device_driver_name(session, device_id):
    """driver_name of the device's (first) deployable, or None."""
    return session.execute(
        sa.select(m.Deployable.driver_name).where(m.Deployable.device_id == device_id)
        .order_by(m.Deployable.id).limit(1)).scalar()


# --- device history (one row per state change, written by states.advance) -----------
def device_history_list(session, device_uuid):
    """Oldest first."""
    stmt = (sa.select(m.DeviceHistory).where(m.DeviceHistory.device_uuid == device_uuid)
            .order_by(m.DeviceHistory.id))
    return session.execute(stmt).scalars().all()


def device_history_record(row):
    """Storage-neutral view of a history row."""
    return {'uuid': row.uuid, 'created_at': timestamp(row.created_at),
            'event': row.event, 'source_state': row.source_state,
            'target_state': row.target_state, 'reason': row.reason,
            'request_id': row.request_id, 'actor': row.actor}


def device_entered(session, device_uuid, state):
    """The newest history row that moved the device into ``state``, or None."""
    stmt = (sa.select(m.DeviceHistory)
            .where(m.DeviceHistory.device_uuid == device_uuid,
                   m.DeviceHistory.target_state == state)
            .order_by(m.DeviceHistory.id.desc()).limit(1))
    return session.execute(stmt).scalar_one_or_none()


def devices_in_states_anywhere(session, device_states):
    """Devices of every host in ``device_states`` (the conductor's periodic tasks)."""
    stmt = sa.select(m.Device).where(m.Device.device_state.in_(device_states))
    return session.execute(stmt.order_by(m.Device.id)).scalars().all()

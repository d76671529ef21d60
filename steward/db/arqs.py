"""Accelerator requests: queries on the ``extended_accelerator_requests`` table.

Row shape (``ROW``): ``ArqRow``, an ARQ's columns and its profile's name as a plain object
that steward.db.transitions.advance() updates in place; the API reads them as
records (``arq_record``: plain dicts it formats per microversion), made in one
Core query. Every filter runs in SQL on an indexed column and related rows come
in the same query (upstream loaded whole tables and filtered in Python, one query
per ARQ for its profile, handle and deployable).
"""
import json
import types

from oslo_db import exception as db_exc
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.db import models as m
from steward.db import perf
from steward.db import query


_HANDLES = m.AttachHandle.__table__
_DEPLOYABLES_T = m.Deployable.__table__


class ArqRow(types.SimpleNamespace):
    """An ARQ as the conductor reads it to change it: its columns and its
    profile's name (``profile_name``), a plain object that ``transitions.advance``
    updates in place. Loading ORM entities with their relationships was the
    biggest cost of a bind and a delete, and nothing here needs an identity map."""


ROW = ArqRow


_ARQ_T, _PROFILE_T = m.ExtARQ.__table__, m.DeviceProfile.__table__
_DEVICES_T = m.Device.__table__
_ARQ_ROWS = (sa.select(*_ARQ_T.c, _PROFILE_T.c.name.label('profile_name'))
             .select_from(_ARQ_T.join(_PROFILE_T,
                                      _PROFILE_T.c.id == _ARQ_T.c.device_profile_id)))
# Nova's calls (by uuid, by instance), built once, with and without a project scope.
_ARQS_BY_UUID = perf.OneOrMany(_ARQ_T.c.uuid, 'uuids', _ARQ_ROWS.where)
_ARQS_BY_UUID_SCOPED = perf.OneOrMany(
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


def arq_get_many(session, uuids, project_id=None) -> list[ROW]:
    """ARQs (ArqRow) by uuid, in the order asked; raises for the first missing one."""
    stmt, params = _ARQS_BY_UUID(uuids) if project_id is None else \
        _ARQS_BY_UUID_SCOPED(uuids, project_id=project_id)
    by_uuid = {r.uuid: r for r in _arq_rows(session.execute(stmt, params))}
    for uuid in uuids:
        if uuid not in by_uuid:
            raise exception.ARQNotFound(resource='Accelerator request', key='uuid',
                                        value=uuid)
    return [by_uuid[u] for u in uuids]


def _for_bind(one_uuid, one_instance, scoped):
    """The bind's read: the ARQs asked for, by uuid (in the caller's project when
    scoped), and every other ARQ of the instances they are bound to, each with
    its device's agent host (``held_host``; None without a deployable)."""
    by_uuid = perf.one_or_many(_ARQ_T.c.uuid, 'uuids', one_uuid)
    if scoped:
        by_uuid = sa.and_(by_uuid, _ARQ_T.c.project_id == sa.bindparam('project_id'))
    by_instance = perf.one_or_many(_ARQ_T.c.instance_uuid, 'instances', one_instance)
    return (_ARQ_ROWS.add_columns(_DEVICES_T.c.hostname.label('held_host'))
            .outerjoin(_DEPLOYABLES_T, _DEPLOYABLES_T.c.id == _ARQ_T.c.deployable_id)
            .outerjoin(_DEVICES_T, _DEVICES_T.c.id == _DEPLOYABLES_T.c.device_id)
            .where(sa.or_(by_uuid, by_instance)))


# Built once per shape (one value or several of each list; scoped or not), as
# perf.OneOrMany does for one list.
_FOR_BIND = {(u, i, p): _for_bind(u, i, p)
             for u in (True, False) for i in (True, False) for p in (True, False)}


def arqs_for_bind(session, uuids, instance_uuids, project_id=None) \
        -> tuple[list[ROW], dict[str, set]]:
    """What a bind reads, in one query: (the ARQs of ``uuids`` in the order asked,
    as arq_get_many returns them, raising for the first missing one; {instance:
    {device hosts}} of the other ARQs of ``instance_uuids``: the agent host of each
    one's device, None when it has no deployable any more). It was two round
    trips of every bind."""
    uuids = list(uuids)
    one_uuid, uuid_param = perf.bound(uuids)
    one_instance, instance_param = perf.bound(instance_uuids)
    params = {'uuids': uuid_param, 'instances': instance_param}
    if project_id is not None:
        params['project_id'] = project_id
    stmt = _FOR_BIND[one_uuid, one_instance, project_id is not None]
    asked, by_uuid, held = set(uuids), {}, {}
    for row in session.execute(stmt, params):
        values = dict(row._mapping)
        host = values.pop('held_host')
        if row.uuid not in asked:
            held.setdefault(row.instance_uuid, set()).add(host)
        elif project_id is None or row.project_id == project_id:
            by_uuid[row.uuid] = ArqRow(**values)
    for uuid in uuids:
        if uuid not in by_uuid:
            raise exception.ARQNotFound(resource='Accelerator request', key='uuid',
                                        value=uuid)
    return [by_uuid[u] for u in uuids], held


def arq_reread(session, arq_id) -> ROW | None:
    """The ARQ (ArqRow, without its profile's name) as last committed, locked, or
    None once deleted. A locking read: under MariaDB's repeatable read a plain
    SELECT would still show the transaction's snapshot."""
    row = session.execute(sa.select(*_ARQ_T.c).where(_ARQ_T.c.id == arq_id)
                               .with_for_update()).first()
    return None if row is None else ArqRow(profile_name=None, **row._mapping)


def arq_list(session, project_id=None, instance_uuid=None, states_in=None) -> list[ROW]:
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


def arq_bound_instances(session) -> list[tuple]:
    """[(instance_uuid, oldest updated_at)] of the instances holding Bound ARQs,
    the least recently updated first."""
    oldest = sa.func.min(sa.func.coalesce(m.ExtARQ.updated_at, m.ExtARQ.created_at))
    stmt = (sa.select(m.ExtARQ.instance_uuid, oldest)
            .where(m.ExtARQ.state == states.ARQ_BOUND,
                   m.ExtARQ.instance_uuid.isnot(None))
            .group_by(m.ExtARQ.instance_uuid)
            .order_by(oldest, m.ExtARQ.instance_uuid))
    return [tuple(row) for row in session.execute(stmt).all()]


def arq_bound_hosts(session, instance_uuid) -> list[tuple[str, str]]:
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


def _new_rows(profile_id, group_ids, project_id):
    now = timeutils.utcnow()
    return [{'uuid': uuidutils.generate_uuid(), 'project_id': project_id,
             'state': states.ARQ_INITIAL, 'device_profile_id': profile_id,
             'device_profile_group_id': group_id, 'created_at': now}
            for group_id in group_ids]


def _created(rows, profile_name):
    return [arq_record(ArqRow(
        hostname=None, device_rp_uuid=None, instance_uuid=None, updated_at=None,
        profile_name=profile_name, **row)) for row in rows]


def arqs_create(session, dp, group_ids, project_id) -> list[dict]:
    """New ARQs of profile ``dp`` (its ORM object or its record), one per entry
    of ``group_ids`` (the profile group each serves), in one INSERT (no ORM unit
    of work: it cost more than the INSERT), on a session or
    Database.single_write()'s connection. Returns their records (arq_record)."""
    profile_id, profile_name = (dp['id'], dp['name']) if isinstance(dp, dict) else \
        (dp.id, dp.name)
    rows = _new_rows(profile_id, group_ids, project_id)
    if rows:
        try:
            session.execute(sa.insert(m.ExtARQ.__table__), rows)
        except (db_exc.DBReferenceError, sa.exc.IntegrityError):
            # The profile was deleted since it was read (its foreign key).
            raise exception.DeviceProfileNotFound(resource='Device Profile', key='name',
                                                  value=profile_name) from None
    return _created(rows, profile_name)


_NEW_ROW_COLUMNS = ('uuid', 'project_id', 'state', 'device_profile_id',
                    'device_profile_group_id', 'created_at')


def _create_from(count):
    """INSERT of ``count`` new ARQs whose rows come from the profile's own row, as
    long as it is still the one a record was read from (its id, uuid, name and
    groups): one SELECT of that row per new ARQ, UNION ALL."""
    same = sa.and_(_PROFILE_T.c.id == sa.bindparam('profile_id'),
                   _PROFILE_T.c.uuid == sa.bindparam('profile_uuid'),
                   _PROFILE_T.c.name == sa.bindparam('profile_name'),
                   _PROFILE_T.c.profile_json == sa.bindparam('profile_json'))
    column = _ARQ_T.c
    rows = [sa.select(sa.bindparam(f'uuid_{i}', type_=column.uuid.type),
                      sa.bindparam('project_id', type_=column.project_id.type),
                      sa.bindparam('state', type_=column.state.type),
                      _PROFILE_T.c.id,
                      sa.bindparam(f'group_{i}', type_=column.device_profile_group_id.type),
                      sa.bindparam('created_at', type_=column.created_at.type)).where(same)
            for i in range(count)]
    # preserve_rowcount: SQLAlchemy keeps an INSERT's row count only when asked.
    return (sa.insert(_ARQ_T)
            .from_select(_NEW_ROW_COLUMNS, rows[0] if count == 1 else sa.union_all(*rows))
            .execution_options(preserve_rowcount=True))


# Built once per number of new ARQs (a profile asks for a few accelerators).
_CREATE_FROM = {}


def arqs_create_from(conn, dp, group_ids, project_id) -> list[dict] | None:
    """arqs_create from a profile record read earlier (``dp``), in one statement
    instead of the profile's read and the INSERT: nothing is inserted, and None
    returned, when that profile is gone or is not the record any more (deleted
    and created again); the caller then reads it again. On
    Database.single_write()'s connection."""
    rows = _new_rows(dp['id'], group_ids, project_id)
    if not rows:
        return None
    stmt = _CREATE_FROM.get(len(rows))
    if stmt is None:
        stmt = _CREATE_FROM.setdefault(len(rows), _create_from(len(rows)))
    params = {'profile_id': dp['id'], 'profile_uuid': dp['uuid'],
              'profile_name': dp['name'], 'profile_json': dp['profile_json'],
              'project_id': project_id, 'state': states.ARQ_INITIAL,
              'created_at': rows[0]['created_at']}
    for i, row in enumerate(rows):
        params[f'uuid_{i}'], params[f'group_{i}'] = row['uuid'], row['device_profile_group_id']
    try:
        inserted = conn.execute(stmt, params).rowcount
    except (db_exc.DBReferenceError, sa.exc.IntegrityError):
        # Deleted between the statement's read of the profile and its foreign
        # key's check (PostgreSQL checks it on the row as last committed).
        return None
    return _created(rows, dp['name']) if inserted == len(rows) else None


def arq_record(arq, handle=None, device_type=None) -> dict:
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
        'created_at': query.timestamp(arq.created_at), 'updated_at': query.timestamp(arq.updated_at),
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


def arq_records(session, project_id=None, instance_uuid=None, states_in=None) -> list[dict]:
    """arq_list's ARQs as records (arq_record), read without the ORM."""
    if instance_uuid is not None and states_in is None and project_id is None:
        return _records(session.execute(_RECORDS_BY_INSTANCE,
                                        {'instance': instance_uuid}))
    return _records(session.execute(
        _arq_filtered(_ARQ_RECORD_SELECT, project_id, instance_uuid, states_in)))


def arq_get_record(session, uuid, project_id=None) -> dict:
    """One ARQ's record (arq_record); ARQNotFound also for another project's."""
    stmt = _ARQ_RECORD_SELECT.where(_ARQ_T.c.uuid == uuid)
    if project_id is not None:
        stmt = stmt.where(_ARQ_T.c.project_id == project_id)
    records = _records(session.execute(stmt))
    if not records:
        raise exception.ARQNotFound(resource='Accelerator request', key='uuid', value=uuid)
    return records[0]


def arq_list_by_uuids_in_state(session, uuids, state) -> list[ROW]:
    if not uuids:
        return []
    # Two conductors may finish the same deletes (reconciliation): each takes the
    # rows the other has not locked instead of both deleting one row.
    stmt = (sa.select(*_ARQ_T.c).where(_ARQ_T.c.uuid.in_(uuids), _ARQ_T.c.state == state)
            .with_for_update(skip_locked=True))
    return [ArqRow(profile_name=None, **row._mapping)
            for row in session.execute(stmt.order_by(_ARQ_T.c.id))]


# Nova's delete of an instance's ARQs (transitions.remove_all): every row of the
# instance removed and returned by one statement, scoped to a project or not.
_REMOVE_OF_INSTANCE = (sa.delete(_ARQ_T)
                       .where(_ARQ_T.c.instance_uuid == sa.bindparam('instance'))
                       .returning(*_ARQ_T.c))
_REMOVE_OF_INSTANCE_SCOPED = (
    sa.delete(_ARQ_T)
    .where(_ARQ_T.c.instance_uuid == sa.bindparam('instance'),
           _ARQ_T.c.project_id == sa.bindparam('project_id'))
    .returning(*_ARQ_T.c))


def arqs_removal_of_instance(instance_uuid, project_id=None) -> tuple:
    """(statement, parameters) that remove the ARQs of ``instance_uuid`` (in
    ``project_id``, when given) and return their columns, for
    transitions.remove_all: what arq_list(instance_uuid=) read and the removal of
    each row, in one statement. Its rows are ArqRows without ``profile_name``."""
    if project_id is None:
        return _REMOVE_OF_INSTANCE, {'instance': instance_uuid}
    return _REMOVE_OF_INSTANCE_SCOPED, {'instance': instance_uuid, 'project_id': project_id}


_DELETE_ARQ = sa.delete(_ARQ_T).where(_ARQ_T.c.id == sa.bindparam('arq_id'))


def arq_remove(session, arq_id) -> None:
    """Delete one ARQ row (the delete path moved it to Deleting first)."""
    session.execute(_DELETE_ARQ, {'arq_id': arq_id})


def arq_state_counts(session) -> list[tuple]:
    """(state, count) of the stored ARQs: what the metrics' ARQ family reports."""
    return [tuple(row) for row in session.execute(
        sa.select(_ARQ_T.c.state, sa.func.count()).group_by(_ARQ_T.c.state)).all()]

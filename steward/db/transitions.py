"""Persisting a state change: ``advance()``, the one function through which every
ARQ ``state``, device ``device_state`` and erase record ``status`` changes.

The edges are steward/common/states.py's tables; this module is their machinery
beside the database (Ironic keeps the same split). ``advance()`` checks that an
edge exists, persists the change with a conditional UPDATE (so two processes
racing on one row cannot both win, with no in-process lock), records a device's
history and last error in the same transaction, and logs one line per transition
once it is committed. Its session listeners are registered by ``register()`` on
the sessionmakers steward/db/session.py builds, and on nothing else.
"""
import logging

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm.attributes import set_committed_value

from steward.common import exception
from steward.common import states

# The name operators know the transition lines by (doc/troubleshooting.md): the
# state machine's, wherever its persistence lives.
LOG = logging.getLogger('steward.common.states')


def advance(session, model, row, target, *, event=None, reason='', values=None,
            kind=None, request_id=None, actor=None, via=None):
    """Move ``row`` (an ORM object of ``model``, or a plain row of its columns
    such as arqs.ArqRow) to ``target``: the only way any ARQ ``state``, device
    ``device_state`` or erase record ``status`` changes.

    The UPDATE is conditional on the current state being a declared source, so a
    concurrent change in another process or thread makes this raise instead of
    silently overwriting. ``values`` are extra columns written in the same UPDATE.
    A model with ``__history__`` (devices) gets a history row in the same
    transaction, naming ``actor`` (default: this conductor), and its
    ``last_error``: the reason when it enters error, cleared when it is available.
    The transition is logged once the transaction commits (never for a rollback).
    ``via``: ``(state, event)`` the row passes through on its way to ``target``
    within this transaction (a bind: BindStarted, then Bound): both edges are
    checked, recorded and logged, and one UPDATE writes the last, since nobody
    outside the transaction can see the state between them.
    Raises InvalidStateTransition (or ConcurrentUpdate when the row moved under us).
    """
    kind = kind or model.__state_kind__
    current = getattr(row, model.__state_column__)
    steps = _steps(kind, row, current, target, event, via)
    now = timeutils.utcnow()
    changes = dict(values or {})
    changes[model.__state_column__] = target
    changes['updated_at'] = now
    history = getattr(model, '__history__', None)
    if history is not None:
        if target == states.DEV_ERROR:
            changes.setdefault('last_error', reason or event or 'error')
        elif target == states.DEV_AVAILABLE:
            changes['last_error'] = None
    conn = _compare_and_swap(session, model, row, kind, current, changes)
    # An ORM object learns its new values as committed ones (nothing to flush);
    # a plain row (arqs.ArqRow) simply takes them.
    write = set_committed_value if hasattr(row, '_sa_instance_state') else setattr
    for key, value in changes.items():
        write(row, key, value)
    if history is not None:
        # Core INSERT, not session.add(): the unit of work's flush at commit was a
        # tenth of a bind's time.
        conn.execute(history.__table__.insert(), [dict(
            uuid=uuidutils.generate_uuid(), device_uuid=row.uuid, created_at=now,
            event=step_event or 'transition', source_state=source, target_state=state,
            reason=reason or None, request_id=request_id,
            actor=(actor or states.default_actor())[:255])
            for source, state, step_event in steps])
    for source, state, step_event in steps:
        _log_after_commit(session, (kind, row.uuid, source, state,
                                    step_event or 'transition', reason, request_id))
    return row


def _steps(kind, row, current, target, event, via):
    """[(source, target, event)] of a transition and the state it passes
    through; raises InvalidStateTransition at the first missing edge."""
    steps, source = [], current
    for state, step_event in ([via] if via else []) + [(target, event)]:
        if source not in states.sources(kind, state, step_event):
            raise exception.InvalidStateTransition(kind=kind, uuid=row.uuid,
                                                   current=source, target=state)
        steps.append((source, state, step_event))
        source = state
    return steps


def remove(session, model, row, target, *, event, request_id=None):
    """Move ``row`` to ``target``, a state left only by the row's removal (an
    ARQ's Deleting), and remove it, in one DELETE conditional on the state read,
    as advance()'s UPDATE is: the edge is checked and logged as advance() does,
    and the row's removal needs no second statement. Raises
    InvalidStateTransition, or ConcurrentUpdate when the row moved under us. Not
    for a model with history (a device keeps its rows)."""
    _refuse_history(model)
    kind = model.__state_kind__
    current = getattr(row, model.__state_column__)
    _steps(kind, row, current, target, event, None)
    _compare_and_swap(session, model, row, kind, current)
    _log_after_commit(session, (kind, row.uuid, current, target, event, '', request_id))


def remove_all(session, model, statement, params, target, *, event, make_row,
               vet=None, request_id=None):
    """Move every row ``statement`` removes to ``target`` (an ARQ's Deleting) and
    remove it, in that one statement: a DELETE ... RETURNING of ``model``'s rows,
    built beside its other queries (steward/db/arqs.py). Each row is removed as it
    stands once the DELETE holds its lock, whatever a concurrent writer committed
    before (READ COMMITTED: PostgreSQL and MariaDB delete the newest version), so
    there is nothing to compare and swap: the edge is checked on the state the
    row was removed in, and a row without one raises InvalidStateTransition,
    which rolls the caller's transaction back with nothing removed. A row found
    in ``target`` already (a removal an older release left half done) is removed
    without a transition of its own. ``vet(rows)`` sees the removed rows
    (``make_row(**columns)`` each) before their edges are checked, and may refuse
    the removal first. Returns the rows in id order (the order remove() takes
    them one by one); each transition is logged once committed, as remove()
    logs. Not for a model with history."""
    _refuse_history(model)
    kind = model.__state_kind__
    rows = sorted((make_row(**row._mapping)
                   for row in session.connection().execute(statement, params)),
                  key=lambda row: row.id)
    if vet is not None:
        vet(rows)
    for row in rows:
        current = getattr(row, model.__state_column__)
        if current == target:
            continue
        _steps(kind, row, current, target, event, None)
        _log_after_commit(session, (kind, row.uuid, current, target, event, '', request_id))
    return rows


def _refuse_history(model):
    """remove() and remove_all() take rows away: not those of a model that keeps
    its rows' history (devices)."""
    if getattr(model, '__history__', None) is not None:
        raise TypeError(f'{model.__name__} rows keep their history: not removed')


def note(session, model, row, *, event, reason='', request_id=None, actor=None):
    """A history row for something that happened to a device without changing its
    state (its health changed while a tenant holds it, issue 38): source and
    target are the state it is in, so a reader looking for when the device entered
    a state (device_history.device_entered) skips it."""
    history = model.__history__
    current = getattr(row, model.__state_column__)
    session.connection().execute(history.__table__.insert(), [dict(
        uuid=uuidutils.generate_uuid(), device_uuid=row.uuid,
        created_at=timeutils.utcnow(), event=event, source_state=current,
        target_state=current or 'unset', reason=reason or None, request_id=request_id,
        actor=(actor or states.default_actor())[:255])])


def _compare_and_swap(session, model, row, kind, current, changes=None):
    """Write ``changes`` to ``row`` (None: delete it) if its state is still
    ``current``, the one read: whoever changed the row in between wins and we
    report the conflict (ConcurrentUpdate) rather than overwrite it. Returns the
    session's connection (Core statements need none of the ORM's execution
    layer)."""
    params = {'row_id': row.id}
    if current is not None:
        params['current'] = current
    columns = None
    if changes is not None:
        params.update({f'new_{key}': value for key, value in changes.items()})
        columns = tuple(sorted(changes))
    conn = session.connection()
    result = conn.execute(_statement(model, columns, current is None), params)
    if result.rowcount != 1:
        raise exception.ConcurrentUpdate(kind=kind, uuid=row.uuid)
    return conn


_STATEMENTS = {}


def _statement(model, columns, from_null):
    """The compare-and-swap UPDATE of ``model`` writing ``columns`` (None: the
    DELETE of remove()), built once per shape with bound parameters (Core, not
    ORM: same SQL, a fraction of the Python; and a statement built once keeps its
    compiled form cached)."""
    key = (model, columns, from_null)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        table = model.__table__
        column = table.c[model.__state_column__]
        same = column.is_(None) if from_null else column == sa.bindparam('current')
        where = (table.c.id == sa.bindparam('row_id'), same)
        stmt = _STATEMENTS[key] = table.delete().where(*where) if columns is None \
            else table.update().where(*where).values(
                {c: sa.bindparam(f'new_{c}') for c in columns})
    return stmt


# A transition that is rolled back did not happen: it is logged once the
# transaction commits, and dropped with it otherwise.
_PENDING_LOGS = 'steward.transition_logs'


def _log_after_commit(session, transition):
    session.info.setdefault(_PENDING_LOGS, []).append(transition)


def _transitions_line(transitions):
    """One line for the transitions a transaction committed, in their order:
    ``<kind> <uuid>: <old> -> <new> (<event>)[ reason=...]``, joined by ``; ``,
    then ``request_id=`` once when they share it (a bind or a delete is one
    transaction: an ARQ's two transitions and its device's are one line, not
    three, at hundreds of boots a second)."""
    ids = {t[6] for t in transitions}
    shared = ids.pop() if len(ids) == 1 else None
    parts = []
    for kind, uuid, current, target, event_name, reason, request_id in transitions:
        part = f'{kind} {uuid}: {current} -> {target} ({event_name})'
        if reason:
            part += f' reason={reason}'
        if request_id and shared is None:
            part += f' request_id={request_id}'
        parts.append(part)
    line = '; '.join(parts)
    return f'{line} request_id={shared}' if shared else line


def _created_history(session, _flush_context):
    """A device created in a state of DEVICE_CREATED_WITH_HISTORY gets its history
    row in the INSERT's transaction, whichever code created it. After the flush,
    ``session.new`` still holds the rows it has just inserted."""
    for target in session.new:
        history = getattr(type(target), '__history__', None)
        if history is None:
            continue
        state = getattr(target, type(target).__state_column__)
        event_name = states.DEVICE_CREATED_WITH_HISTORY.get(state)
        if event_name is None:
            continue
        session.connection().execute(history.__table__.insert(), [dict(
            uuid=uuidutils.generate_uuid(), device_uuid=target.uuid,
            created_at=target.created_at or timeutils.utcnow(), event=event_name,
            source_state=None, target_state=state,
            reason=getattr(target, 'last_error', None), request_id=None,
            actor=states.default_actor()[:255])])


def _flush_logs(session):
    transitions = session.info.pop(_PENDING_LOGS, None)
    if transitions:
        LOG.info('%s', _transitions_line(transitions))


def _drop_logs(session):
    session.info.pop(_PENDING_LOGS, None)


def register(sessionmaker):
    """Attach the transition machinery to the sessions ``sessionmaker`` makes: a
    created device's history row, and the commit log (written after a commit,
    dropped with a rollback)."""
    event.listen(sessionmaker, 'after_flush', _created_history)
    event.listen(sessionmaker, 'after_commit', _flush_logs)
    event.listen(sessionmaker, 'after_rollback', _drop_logs)

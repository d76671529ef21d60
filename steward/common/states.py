"""The state machine of accelerator requests and devices: every state, every edge,
and the one function through which every state change goes.

Shape borrowed from Ironic: states are named constants, the transitions are one
declared table (read it top to bottom to know everything that can happen), and
``advance()`` is the choke point that checks an edge exists, persists the change
with a conditional UPDATE (so two processes racing on one row cannot both win, with
no in-process lock), records a device's history and last error in the same
transaction, and logs one line per transition once it is committed.
"""
import collections
import logging

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm
from sqlalchemy.orm.attributes import set_committed_value

from steward.common import exception
from steward.conf import CONF

LOG = logging.getLogger(__name__)

# --- Accelerator request (ARQ) states ------------------------------------------------
ARQ_INITIAL = 'Initial'
"""Created from a device profile group; not tied to a host, RP or instance."""
ARQ_BIND_STARTED = 'BindStarted'
"""Bind accepted and validated; an attach handle is being allocated."""
ARQ_BOUND = 'Bound'
"""Holds an attach handle on the device RP Nova chose; Nova may attach it."""
ARQ_BIND_FAILED = 'BindFailed'
"""Bind could not complete; nothing is held. Unbind or delete it."""
ARQ_UNBOUND = 'Unbound'
"""Released after a bind; can be bound again."""
ARQ_DELETING = 'Deleting'
"""Being released and removed; a row left here is finished by reconciliation."""

ARQ_STATES = (ARQ_INITIAL, ARQ_BIND_STARTED, ARQ_BOUND, ARQ_BIND_FAILED, ARQ_UNBOUND,
              ARQ_DELETING)
ARQ_UNBIND_FAILED = 'UnbindFailed'
"""Retired: upstream's state for a release that failed part-way. No release of
Steward's can fail that way (an unbind only frees rows), so nothing enters it and
it is no state of the machine; the column still accepts it (migration 0001 and
upstream databases know it) and metrics still count it, so a row holding it is
seen rather than unreadable."""
ARQ_RETIRED_STATES = (ARQ_UNBIND_FAILED,)
ARQ_STORED_STATES = ARQ_STATES + ARQ_RETIRED_STATES
"""Every value the ARQ state column may hold."""
ARQ_RESOLVED = (ARQ_BOUND, ARQ_BIND_FAILED, ARQ_DELETING)
"""States in which Nova's wait for a bind is over (``bind_state=resolved``)."""
ARQ_BINDABLE = (ARQ_INITIAL, ARQ_UNBOUND)
ARQ_HOLDS_HANDLE = (ARQ_BIND_STARTED, ARQ_BOUND) + ARQ_RETIRED_STATES
"""States in which an ARQ may reference an in-use attach handle."""

# --- Device lifecycle states (spec 1; shared by every driver) -----------------------
DEV_AVAILABLE = 'available'
"""Clean and schedulable: Placement reserved = 0."""
DEV_ALLOCATED = 'allocated'
"""At least one accelerator of the device is bound to an instance; or, for a device
that needs cleaning, released while its agent could not be asked to clean it (it
stays reserved until the agent's start-up recovery or the conductor's periodic task
sends it to pending_cleaning)."""
DEV_PENDING_CLEANING = 'pending_cleaning'
"""Released by its tenant; the cleanup has been asked of the agent."""
DEV_CLEANING = 'cleaning'
"""The agent is running the locked-in cleanup action."""
DEV_ERROR = 'error'
"""Cleanup failed, timed out or was interrupted: never handed out until an operator
re-cleans it (POST /v2/devices/{uuid}/clean)."""

DEVICE_STATES = (DEV_AVAILABLE, DEV_ALLOCATED, DEV_PENDING_CLEANING, DEV_CLEANING,
                 DEV_ERROR)
DEV_RESERVED_STATES = (DEV_ALLOCATED, DEV_PENDING_CLEANING, DEV_CLEANING, DEV_ERROR)
"""For single-accelerator devices Placement reserved = total in exactly these."""

DEVICE_INITIAL_STATES = (None, DEV_AVAILABLE, DEV_ERROR)
"""What a device row starts in: discovery creates it available, or in error when
its cleanup policy cannot be met; None is a row from before device_state."""
ARQ_INITIAL_STATES = (ARQ_INITIAL,)

DEVICE_CREATED_WITH_HISTORY = {DEV_ERROR: 'discovered'}
"""Initial device states whose creation is a history row of its own (event,
reason: the device's last_error): a device discovered already in error was never
available, and its history says so from the start."""

# --- Erase record states (one cleanup attempt of one device) ------------------------
ERASE_RUNNING = 'running'
"""The agent runs the cleanup; its progress reports update the record."""
ERASE_SUCCEEDED = 'succeeded'
"""The cleanup ran and its read-back verification passed: the device was cleaned."""
ERASE_FAILED = 'failed'
"""The cleanup failed or got stuck, or could not be asked for (an agent too old)."""
ERASE_INTERRUPTED = 'interrupted'
"""The agent restarted during the cleanup, or its result came after the device had
left cleaning: nothing it says is taken as a cleaning."""

ERASE_STATES = (ERASE_RUNNING, ERASE_SUCCEEDED, ERASE_FAILED, ERASE_INTERRUPTED)
ERASE_INITIAL_STATES = (ERASE_RUNNING, ERASE_FAILED, ERASE_INTERRUPTED)
"""What an erase record is created in: running when the agent starts a cleanup;
failed or interrupted when no attempt could run (agent too old, stuck before it
started, agent restarted before it started), so that auditors see why."""

DEVICE_STATUS_ENABLED = 'enabled'
DEVICE_STATUS_MAINTAINING = 'maintaining'
DEVICE_STATUSES = (DEVICE_STATUS_ENABLED, DEVICE_STATUS_MAINTAINING)

Transition = collections.namedtuple('Transition', 'source event target')

# One line per edge. ``None`` as a source is a row whose state was never set (a
# device created before device_state existed, backfilled by the online migration).
ARQ_TRANSITIONS = (
    Transition(ARQ_INITIAL, 'bind', ARQ_BIND_STARTED),
    Transition(ARQ_UNBOUND, 'bind', ARQ_BIND_STARTED),
    Transition(ARQ_BIND_STARTED, 'bind_done', ARQ_BOUND),
    Transition(ARQ_BIND_STARTED, 'bind_fail', ARQ_BIND_FAILED),
    # A multi-ARQ bind is all or nothing: a sibling's failure fails the bound ones.
    Transition(ARQ_BOUND, 'bind_fail', ARQ_BIND_FAILED),
    Transition(ARQ_INITIAL, 'unbind', ARQ_UNBOUND),
    Transition(ARQ_BIND_STARTED, 'unbind', ARQ_UNBOUND),
    Transition(ARQ_BOUND, 'unbind', ARQ_UNBOUND),
    Transition(ARQ_BIND_FAILED, 'unbind', ARQ_UNBOUND),
    Transition(ARQ_INITIAL, 'delete', ARQ_DELETING),
    Transition(ARQ_BIND_STARTED, 'delete', ARQ_DELETING),
    Transition(ARQ_BOUND, 'delete', ARQ_DELETING),
    Transition(ARQ_UNBOUND, 'delete', ARQ_DELETING),
    Transition(ARQ_BIND_FAILED, 'delete', ARQ_DELETING),
)

DEVICE_TRANSITIONS = (
    Transition(None, 'backfill', DEV_AVAILABLE),
    Transition(None, 'backfill', DEV_ALLOCATED),
    Transition(DEV_AVAILABLE, 'bind', DEV_ALLOCATED),
    # Devices that need no cleaning go straight back when their last handle is freed.
    Transition(DEV_ALLOCATED, 'release', DEV_AVAILABLE),
    Transition(DEV_ALLOCATED, 'release_for_cleaning', DEV_PENDING_CLEANING),
    # An allocated device with no active ARQ (its agent was unreachable at the
    # release), found by the agent's start-up recovery or the conductor's periodic task.
    Transition(DEV_ALLOCATED, 'recover_missed_cleanup', DEV_PENDING_CLEANING),
    Transition(DEV_PENDING_CLEANING, 'start_cleaning', DEV_CLEANING),
    Transition(DEV_CLEANING, 'cleaned', DEV_AVAILABLE),
    Transition(DEV_CLEANING, 'fail', DEV_ERROR),
    # The agent was restarted after it took the request, nothing progressed for
    # cleanup_timeout + cleanup_grace (the conductor's periodic task), or the agent
    # is too old to be asked to clean (a device is never handed out uncleaned).
    Transition(DEV_PENDING_CLEANING, 'fail', DEV_ERROR),
    # Discovery found the hardware cannot meet the configured cleanup policy.
    Transition(DEV_AVAILABLE, 'fail', DEV_ERROR),
    Transition(DEV_ERROR, 'operator_clean', DEV_PENDING_CLEANING),
)

ERASE_TRANSITIONS = (
    Transition(ERASE_RUNNING, 'succeed', ERASE_SUCCEEDED),
    Transition(ERASE_RUNNING, 'fail', ERASE_FAILED),
    # The agent restarted during it, or a success came after the device left
    # cleaning (timed out, recovered).
    Transition(ERASE_RUNNING, 'interrupt', ERASE_INTERRUPTED),
)

_TABLES = {'arq': ARQ_TRANSITIONS, 'device': DEVICE_TRANSITIONS,
           'erase': ERASE_TRANSITIONS}
INITIAL_STATES = {'arq': ARQ_INITIAL_STATES, 'device': DEVICE_INITIAL_STATES,
                  'erase': ERASE_INITIAL_STATES}
STATES = {'arq': ARQ_STATES, 'device': DEVICE_STATES, 'erase': ERASE_STATES}


def sources(kind, target, event=None):
    """States from which ``target`` may be entered (optionally by one event)."""
    return tuple(t.source for t in _TABLES[kind]
                 if t.target == target and (event is None or t.event == event))


def can_transition(kind, current, target, event=None):
    return current in sources(kind, target, event)


def default_actor():
    """Who a transition is recorded as made by when the caller names nobody: this
    conductor."""
    return f'conductor {CONF.host}'


def actor_of(ctx):
    """The API user behind ``ctx`` when there is one, else this conductor."""
    user = getattr(ctx, 'user_id', None)
    return f'user {user}' if user else default_actor()


def advance(session, model, row, target, *, event=None, reason='', values=None,
            kind=None, request_id=None, actor=None):
    """Move ``row`` (an ORM object of ``model``, or a plain row of its columns
    such as db.ArqRow) to ``target``: the only way any ARQ ``state``, device
    ``device_state`` or erase record ``status`` changes.

    The UPDATE is conditional on the current state being a declared source, so a
    concurrent change in another process or thread makes this raise instead of
    silently overwriting. ``values`` are extra columns written in the same UPDATE.
    A model with ``__history__`` (devices) gets a history row in the same
    transaction, naming ``actor`` (default: this conductor), and its
    ``last_error``: the reason when it enters error, cleared when it is available.
    The transition is logged once the transaction commits (never for a rollback).
    Raises InvalidStateTransition (or ConcurrentUpdate when the row moved under us).
    """
    kind = kind or model.__state_kind__
    current = getattr(row, model.__state_column__)
    allowed = sources(kind, target, event)
    if current not in allowed:
        raise exception.InvalidStateTransition(kind=kind, uuid=row.uuid,
                                               current=current, target=target)
    now = timeutils.utcnow()
    changes = dict(values or {})
    changes[model.__state_column__] = target
    changes['updated_at'] = now
    history = getattr(model, '__history__', None)
    if history is not None:
        if target == DEV_ERROR:
            changes.setdefault('last_error', reason or event or 'error')
        elif target == DEV_AVAILABLE:
            changes['last_error'] = None
    # Compare-and-swap on the state we read: whoever changed the row in between
    # wins and we report the conflict rather than overwrite it.
    params = {f'new_{key}': value for key, value in changes.items()}
    params['row_id'] = row.id
    if current is not None:
        params['current'] = current
    # On the session's connection: Core statements need none of the ORM's
    # execution layer.
    conn = session.connection()
    result = conn.execute(_update_statement(model, tuple(sorted(changes)),
                                            current is None), params)
    if result.rowcount != 1:
        raise exception.ConcurrentUpdate(kind=kind, uuid=row.uuid)
    # An ORM object learns its new values as committed ones (nothing to flush);
    # a plain row (db.ArqRow) simply takes them.
    write = set_committed_value if hasattr(row, '_sa_instance_state') else setattr
    for key, value in changes.items():
        write(row, key, value)
    if history is not None:
        # Core INSERT, not session.add(): the unit of work's flush at commit was a
        # tenth of a bind's time.
        conn.execute(history.__table__.insert(), [dict(
            uuid=uuidutils.generate_uuid(), device_uuid=row.uuid, created_at=now,
            event=event or 'transition', source_state=current, target_state=target,
            reason=reason or None, request_id=request_id,
            actor=(actor or default_actor())[:255])])
    _log_after_commit(session, (kind, row.uuid, current, target, event or 'transition',
                                reason, request_id))
    return row


_UPDATES = {}


def _update_statement(model, columns, from_null):
    """The compare-and-swap UPDATE of ``model`` writing ``columns``, built once per
    shape with bound parameters (Core, not ORM: same SQL, a fraction of the Python;
    and a statement built once keeps its compiled form cached)."""
    key = (model, columns, from_null)
    stmt = _UPDATES.get(key)
    if stmt is None:
        table = model.__table__
        column = table.c[model.__state_column__]
        same = column.is_(None) if from_null else column == sa.bindparam('current')
        stmt = _UPDATES[key] = table.update().where(
            table.c.id == sa.bindparam('row_id'), same).values(
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


def check_created(kind, state):
    """A row of ``kind`` is created in ``state``: refuse any but an initial one."""
    if state not in INITIAL_STATES[kind]:
        raise exception.InvalidStateTransition(kind=kind, uuid='(new)', current=None,
                                               target=state)


@event.listens_for(orm.Mapper, 'after_insert')
def _created_history(_mapper, connection, target):
    """A device created in a state of DEVICE_CREATED_WITH_HISTORY gets its history
    row in the INSERT's transaction, whichever code created it."""
    history = getattr(type(target), '__history__', None)
    if history is None:
        return
    state = getattr(target, type(target).__state_column__)
    event_name = DEVICE_CREATED_WITH_HISTORY.get(state)
    if event_name is None:
        return
    connection.execute(history.__table__.insert(), [dict(
        uuid=uuidutils.generate_uuid(), device_uuid=target.uuid,
        created_at=target.created_at or timeutils.utcnow(), event=event_name,
        source_state=None, target_state=state,
        reason=getattr(target, 'last_error', None), request_id=None,
        actor=default_actor()[:255])])


@event.listens_for(orm.Session, 'after_commit')
def _flush_logs(session):
    transitions = session.info.pop(_PENDING_LOGS, None)
    if transitions:
        LOG.info('%s', _transitions_line(transitions))


@event.listens_for(orm.Session, 'after_rollback')
def _drop_logs(session):
    session.info.pop(_PENDING_LOGS, None)

"""The state machine of accelerator requests, devices and erase records: every
state, every edge, and the pure checks on them.

Shape borrowed from Ironic: states are named constants and the transitions are one
declared table (read it top to bottom to know everything that can happen). Nothing
here touches the database: ``steward.db.transitions.advance()`` is the choke point
through which every state change is persisted, checked against these tables.
"""
import collections
import contextlib
import contextvars

from steward.common import exception
from steward.conf import CONF

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
"""Cleanup failed, timed out or was interrupted, or the device's driver read it
unhealthy: never handed out until an operator re-cleans it (POST
/v2/devices/{uuid}/clean; a device read unhealthy only once the condition has
cleared)."""

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
    # Health (issue 38): its driver read the device unhealthy while nothing was on
    # it; or a tenant released it (a device that needs no cleaning), or its
    # cleanup ended, after it was read unhealthy: never handed out again.
    Transition(DEV_AVAILABLE, 'unhealthy', DEV_ERROR),
    Transition(DEV_ALLOCATED, 'release_unhealthy', DEV_ERROR),
    Transition(DEV_CLEANING, 'unhealthy', DEV_ERROR),
    # A device that needs no cleaning, back from a health fault that cleared.
    Transition(DEV_ERROR, 'operator_clean', DEV_AVAILABLE),
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


# Who the code running in this context acts as, when not this conductor: an API
# process running the ARQ operations (acting_as). A context variable, so each
# request's thread says it for itself.
_ACTOR = contextvars.ContextVar('steward_actor', default=None)


@contextlib.contextmanager
def acting_as(actor):
    """Transitions made in the block are recorded as made by ``actor``."""
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def default_actor():
    """Who a transition is recorded as made by when the caller names nobody: this
    conductor, or whom an enclosing ``acting_as`` names."""
    return _ACTOR.get() or f'conductor {CONF.host}'


def actor_of(ctx):
    """The API user behind ``ctx`` when there is one, else this conductor."""
    user = getattr(ctx, 'user_id', None)
    return f'user {user}' if user else default_actor()


def check_created(kind, state):
    """A row of ``kind`` is created in ``state``: refuse any but an initial one."""
    if state not in INITIAL_STATES[kind]:
        raise exception.InvalidStateTransition(kind=kind, uuid='(new)', current=None,
                                               target=state)

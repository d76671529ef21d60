"""Device lifecycle around binds: the bind guard (the devices' row locks),
device_state on bind and release, and the Placement reservation that mirrors it.
The rule itself (single or shared, what ``reserved`` must be, who may bind) is
steward/arqs/reservation.py.

Run by the ARQ operations (steward/arqs/ops.py) wherever they run, API process
or conductor; a conductor's report, cleanup and self-healing use the same lock
order, the cleaning rule and ``current_reserved`` (steward/conductor)."""
import dataclasses
import functools
import logging

from steward.arqs import reservation
from steward.common import states
from steward.db import attributes as attribute_db
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.db import discoveries
from steward.db import models as m
from steward.db import transitions

LOG = logging.getLogger(__name__)

CLEANABLE_TYPES = frozenset(['NVME'])


@dataclasses.dataclass(frozen=True)
class CleanupRequest:
    """Returned by release_after_unbind for a device that must be cleaned before it
    is used again: once the transaction is committed, the caller moves it to
    pending_cleaning and asks its agent to clean it, if the agent answers."""
    device_uuid: str


def supports_cleaning(device):
    return device.type in CLEANABLE_TYPES


def lock_devices(session, device_ids):
    """Row-lock devices for the rest of the transaction, always in id order: a bind
    and a host's discovery report (which locks all of the host's devices) then
    queue on each other instead of deadlocking. SQLite writers are serial already
    and ignore FOR UPDATE."""
    return [device for device, _ in lock_devices_counted(session, device_ids)]


def lock_devices_counted(session, device_ids, shared=False):
    """lock_devices, each device with its accelerator count (what the reservation
    rule needs) read in the same statement: [(Device, count)] in id order.
    ``shared``: see devices.devices_lock_counted."""
    return device_db.devices_lock_counted(session, device_ids, shared=shared)


def lock_for_bind(session, device_states, exclusive=False):
    """Lock the devices a bind takes handles of (``device_states``: {device id: the
    state read with its deployable}), as lock_devices_counted returns them.

    A device allocated already stays allocated through the bind (mark_allocated
    writes nothing): a share lock is enough to keep it from being released,
    reported or latched under the bind, and binds to one device then run side by
    side instead of one after the other (16 boots on one shared FPGA). Any other
    state may change with the bind, and ``exclusive`` asks for it: an exclusive
    lock, as before.

    Returns None when a device moved between the read and the share lock: the
    bind then ends its transaction, which has written nothing, and runs again
    with exclusive locks. Upgrading the lock in the transaction instead made two
    such binds a deadlock, which the database breaks only after a second."""
    ids = list(device_states)
    if exclusive or not all(state == states.DEV_ALLOCATED
                            for state in device_states.values()):
        return lock_devices_counted(session, ids)
    locked = lock_devices_counted(session, ids, shared=True)
    if not all(device.device_state == states.DEV_ALLOCATED for device, _ in locked):
        return None
    return locked


def check_bindable(session, deployable, locked=None):
    """The bind guard: raises unless ``deployable``'s device may take a binding.
    The device row is re-read under a row lock first: concurrent binds to one
    device (PostgreSQL runs them in parallel) then see each other's device_state
    instead of racing on a stale copy. ``locked``: ``(device, accelerators)`` as
    lock_devices_counted returned them earlier in this transaction (the lock is
    held until it ends), instead of locking again."""
    device, count = locked or lock_devices_counted(session, [deployable.device_id])[0]
    # The whole device's accelerators, not the deployable's: an mdev parent with a
    # 1-instance type beside others is shared, and the other types may be in use.
    refusal = reservation.policy(session, device, accelerators=count).refusal
    if refusal is not None:
        raise refusal
    return device


def mark_allocated(session, device, ctx):
    """After a handle was taken: available -> allocated. True if it changed."""
    if device.device_state == states.DEV_ALLOCATED:
        return False
    transitions.advance(session, m.Device, device, states.DEV_ALLOCATED, event='bind',
                        request_id=ctx.request_id)
    return True


def release_after_unbind(session, deployable_id, ctx):
    """A handle of ``deployable_id`` was freed. When the device has none left in
    use it leaves ``allocated`` for ``available``; a device whose driver must clean
    it first stays ``allocated`` (reserved) in this transaction. Returns what must
    happen after the commit: deployables whose Placement reservation is lifted,
    and a CleanupRequest for a device to clean."""
    if deployable_id is None:
        return []
    row = device_db.device_release_view(session, deployable_id)
    if row is None:
        return []
    device, accelerators, in_use = row
    if device.device_state != states.DEV_ALLOCATED or in_use:
        return []
    if supports_cleaning(device):
        # Whether its agent can be asked is known only by asking (a ping after
        # the commit): holding this transaction open for it would hold the row.
        # Its provider's reservation is written first: a pool's unit of it is
        # out from now until its cleanup is verified (reservation.py); a drive
        # alone stays reserved whole, which the write finds already so.
        dep = deployable_db.deployable_get_by_id(session, deployable_id)
        session.expunge(dep)
        return [dep, CleanupRequest(device.uuid)]
    if device.health_fault:
        # Read unhealthy while its tenant held it (issue 38): out of service now,
        # and its reservation stays (the rule reserves a faulted device whole).
        transitions.advance(session, m.Device, device, states.DEV_ERROR,
                            event='release_unhealthy',
                            reason=f'unhealthy: {device.health_fault}',
                            request_id=ctx.request_id)
        return []
    transitions.advance(session, m.Device, device, states.DEV_AVAILABLE, event='release',
                        request_id=ctx.request_id)
    if reservation.policy(session, device, accelerators=accelerators).single:
        dep = deployable_db.deployable_get_by_id(session, deployable_id)
        session.expunge(dep)
        return [dep]
    return []


def rc_of(deps, deployable):
    """The resource class of ``deployable`` (its ``rc`` attribute), or None."""
    with deps.database.reader() as s:
        attrs = attribute_db.attribute_list(s, {'deployable_id': deployable.id, 'key': 'rc'})
    return attrs[0].value if attrs else None


def current_reserved(deps, deployable_id, fallback=None):
    """The reservation rule on the rows as they are now. The Placement client calls
    it after reading the provider's generation, on every attempt, so when two
    conductors race the last writer writes the newest device state."""
    with deps.database.reader() as s:
        dep = deployable_db.deployable_get_by_id(s, deployable_id)
        if dep is None:
            return fallback
        if dep.rp_uuid is None:
            device = device_db.device_get_by_id(s, dep.device_id)
            wanted = reservation.policy(s, device).reserved_for(dep)
        else:
            # The provider's, whose deployables may be a pool's (issue 52).
            wanted = reservation.members_reserved(s, discoveries.provider_members(
                s, [dep.rp_uuid]).get(dep.rp_uuid, []))
    return fallback if wanted is None else wanted


def reserve(deps, deployable, reserve):
    """Reserve (or free) a single-accelerator deployable whole in Placement, to
    whatever its device's state asks for when the write happens."""
    if not deployable.rp_uuid:
        return
    rc = rc_of(deps, deployable)
    if rc is None:
        LOG.warning('Deployable %s has no resource class; nothing to reserve',
                    deployable.uuid)
        return
    deps.placement().set_reserved(
        deployable.rp_uuid, rc,
        functools.partial(current_reserved, deps, deployable.id,
                          'total' if reserve else 0))

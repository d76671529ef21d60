"""Device lifecycle around binds: the bind guard, device_state on bind and release,
and the Placement reservation that mirrors it.

The reservation rule (spec 1, issue "Steward core" item 7):

* A device with ONE accelerator (sum of num_accelerators over its deployables is 1:
  a PCI function, an NVMe controller) is reserved whole in Placement
  (``reserved = total``) whenever its device_state is not ``available``. Binding
  sets ``allocated`` and reserves; releasing it (when it needs no cleaning) returns
  ``available`` and ``reserved = 0``. This keeps a device that is in use, awaiting
  cleanup or failed out of allocation candidates even if an allocation is lost.
* A device with SEVERAL accelerators (the fake FPGA's 16 functions, an mdev parent's
  vGPUs) is ``allocated`` while any of its handles is in use, but Placement's own
  allocations account for usage: reserving total there would hide every other vGPU
  of the parent from the scheduler. It is reserved whole only when it must not be
  used at all (pending_cleaning, cleaning, error).
* ``status = maintaining`` (disable) reserves whole in both cases.
"""
import dataclasses
import functools
import logging

import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.db import api as db
from steward.db import models as m

LOG = logging.getLogger(__name__)

CLEANABLE_TYPES = frozenset(['NVME'])
_placement = None
_agent_api = None


@dataclasses.dataclass(frozen=True)
class CleanupRequest:
    """Returned by release_after_unbind for a device that must be cleaned before it
    is used again: once the transaction is committed, lift_reservations moves it to
    pending_cleaning and asks its agent to clean it, if the agent answers."""
    device_uuid: str


def set_placement_client(client):
    global _placement
    _placement = client


def set_agent_api(api):
    global _agent_api
    _agent_api = api


def agent_api():
    global _agent_api
    if _agent_api is None:
        from steward.agent import rpcapi as agent_rpcapi
        _agent_api = agent_rpcapi.AgentAPI()
    return _agent_api


def placement():
    if _placement is None:
        raise exception.ServiceUnavailable(service='Placement',
                                           reason='no Placement client configured')
    return _placement


def supports_cleaning(device):
    return device.type in CLEANABLE_TYPES


def accelerators_of(session, device_id):
    return session.execute(
        sa.select(sa.func.coalesce(sa.func.sum(m.Deployable.num_accelerators), 0))
        .where(m.Deployable.device_id == device_id)).scalar()


def desired_reserved(device, single, total):
    """Placement ``reserved`` for one deployable of ``device`` (see module doc)."""
    if device.status == states.DEVICE_STATUS_MAINTAINING:
        return total
    state = device.device_state
    if state is None:
        return None     # not backfilled yet: leave Placement as it is
    if single:
        return 0 if state == states.DEV_AVAILABLE else total
    return total if state in (states.DEV_PENDING_CLEANING, states.DEV_CLEANING,
                              states.DEV_ERROR) else 0


def check_bindable(deployable, session=None):
    """The bind guard: raises unless ``deployable``'s device may take a binding.

    With a session, the device row is re-read under a row lock first: concurrent
    binds to one device (PostgreSQL runs them in parallel) then see each other's
    device_state instead of racing on a stale copy. SQLite writers are serial
    already and ignore FOR UPDATE."""
    if session is not None:
        session.execute(sa.select(m.Device).where(m.Device.id == deployable.device_id)
                        .with_for_update().execution_options(populate_existing=True)
                        ).scalar_one()
    device = deployable.device
    if device.status == states.DEVICE_STATUS_MAINTAINING:
        raise exception.DeviceMaintaining(uuid=device.uuid)
    if device.missing_since is not None:
        raise exception.DeviceMissing(uuid=device.uuid, host=device.hostname,
                                      since=db.timestamp(device.missing_since),
                                      action='bound')
    # Same notion of "one accelerator" as the reservation rule: the whole device's,
    # not the deployable's (an mdev parent with a 1-instance type beside others
    # is shared, and the other types may be in use).
    single = (accelerators_of(session, device.id) if session is not None
              else deployable.num_accelerators) == 1
    allowed = (states.DEV_AVAILABLE,) if single else (
        states.DEV_AVAILABLE, states.DEV_ALLOCATED)
    if device.device_state not in allowed:
        raise exception.DeviceNotAvailable(uuid=device.uuid,
                                           state=device.device_state or 'not backfilled')


def mark_allocated(session, deployable, ctx):
    """After a handle was taken: available -> allocated. True if it changed."""
    device = deployable.device
    if device.device_state == states.DEV_ALLOCATED:
        return False
    states.advance(session, m.Device, device, states.DEV_ALLOCATED, event='bind',
                   request_id=ctx.request_id)
    return True


def release_after_unbind(session, deployable_id, ctx):
    """A handle of ``deployable_id`` was freed. When the device has none left in
    use it leaves ``allocated`` for ``available``; a device whose driver must clean
    it first stays ``allocated`` (reserved) in this transaction. Returns what
    lift_reservations must do after the commit: deployables whose Placement
    reservation is lifted, and a CleanupRequest for a device to clean."""
    if deployable_id is None:
        return []
    dep = session.get(m.Deployable, deployable_id)
    if dep is None:
        return []
    device = session.get(m.Device, dep.device_id)
    if device.device_state != states.DEV_ALLOCATED or \
            db.device_handles_in_use(session, device.id):
        return []
    if supports_cleaning(device):
        # Whether its agent can be asked is known only by asking (a ping after
        # the commit): holding this transaction open for it would hold the row.
        return [CleanupRequest(device.uuid)]
    states.advance(session, m.Device, device, states.DEV_AVAILABLE, event='release',
                   request_id=ctx.request_id)
    if accelerators_of(session, device.id) == 1:
        session.expunge(dep)
        return [dep]
    return []


def _rc_of(deployable):
    from steward.db import session as db_session
    with db_session.reader() as s:
        attrs = db.attribute_list(s, {'deployable_id': deployable.id, 'key': 'rc'})
    return attrs[0].value if attrs else None


def current_reserved(deployable_id, fallback=None):
    """``desired_reserved`` from the rows as they are now. The Placement client
    calls it after reading the provider's generation, on every attempt, so when two
    conductors race the last writer writes the newest device state."""
    from steward.db import session as db_session
    with db_session.reader() as s:
        dep = s.get(m.Deployable, deployable_id)
        if dep is None:
            return fallback
        device = s.get(m.Device, dep.device_id)
        single = accelerators_of(s, device.id) == 1
        wanted = desired_reserved(device, single, dep.num_accelerators)
    return fallback if wanted is None else wanted


def reserve(deployable, reserve):
    """Reserve (or free) a single-accelerator deployable whole in Placement, to
    whatever its device's state asks for when the write happens."""
    if not deployable.rp_uuid:
        return
    rc = _rc_of(deployable)
    if rc is None:
        LOG.warning('Deployable %s has no resource class; nothing to reserve',
                    deployable.uuid)
        return
    placement().set_reserved(
        deployable.rp_uuid, rc,
        functools.partial(current_reserved, deployable.id, 'total' if reserve else 0))


def lift_reservations(deployables, ctx=None):
    """After a release is committed: lift reservations, and dispatch cleanups
    (the CleanupRequests among ``deployables``)."""
    for dep in deployables:
        if isinstance(dep, CleanupRequest):
            _dispatch_cleanup(ctx, dep.device_uuid)
            continue
        try:
            reserve(dep, reserve=False)
        except exception.StewardError as err:
            # Safe direction: the device stays unschedulable until the next sync
            # puts reserved back in line with device_state.
            LOG.error('Could not lift the Placement reservation of %s: %s',
                      dep.rp_uuid, err)


def _dispatch_cleanup(ctx, device_uuid):
    from oslo_messaging import exceptions as messaging_exc
    from steward.common import context
    from steward.conductor import cleanup_ops
    try:
        cleanup_ops.release_for_cleaning(ctx or context.get_admin_context(), device_uuid)
    except (exception.StewardError, messaging_exc.MessagingException) as err:
        # The release stands (it is committed); the device stays reserved, and the
        # conductor's periodic tasks or the agent's next start finish its cleanup.
        LOG.error('device %s: cleanup could not be dispatched: %s', device_uuid, err)


def set_status(ctx, device_uuid, status):
    """Enable/disable (maintaining): persist, then reserve or free in Placement."""
    from steward.db import session as db_session
    with db_session.writer() as s:
        device = db.device_get(s, device_uuid)
        if device.status != status:
            device.status = status
            LOG.info('device %s: status -> %s request_id=%s', device.uuid, status,
                     ctx.request_id)
        deps = db.deployable_list(s, {'device_id': device.id})
        for d in deps:
            s.expunge(d)
    for dep in deps:
        rc = _rc_of(dep) if dep.rp_uuid else None
        if rc and current_reserved(dep.id) is not None:
            placement().set_reserved(dep.rp_uuid, rc,
                                     functools.partial(current_reserved, dep.id))

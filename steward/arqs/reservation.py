"""The one reservation rule: is a device single-accelerator, what must Placement's
``reserved`` be for each of its deployables, and may it take a binding now.

* A device with ONE accelerator (sum of num_accelerators over its deployables is 1:
  a PCI function, an NVMe controller) is reserved whole in Placement
  (``reserved = total``) whenever its device_state is not ``available``: a device
  in use, awaiting cleanup or failed stays out of allocation candidates even if an
  allocation is lost. It may be bound only while ``available``.
* A device with SEVERAL accelerators (the fake FPGA's 16 functions, an mdev parent's
  vGPUs) is ``allocated`` while any of its handles is in use, but Placement's own
  allocations account for usage: reserving total there would hide every other vGPU
  of the parent from the scheduler. It is reserved whole only when it must not be
  used at all (pending_cleaning, cleaning, error), and may be bound while
  ``available`` or ``allocated``.
* ``status = maintaining`` (disable) reserves whole in both cases and refuses binds.
* A device with a health fault (``health_fault`` set: its driver read it unhealthy,
  issue 38) reserves whole in both cases and refuses binds, whatever its state: its
  tenant keeps it, nothing new lands on it.
* A missing device (``missing_since`` set) is never bound; its reservation stays
  what its state asks (it is kept only while not available).
* A device whose state was never set (before the online data migration) keeps
  whatever Placement has (``None``) and is not bound.
* A POOL (issue 52: one provider for the interchangeable devices of one host,
  steward/drivers/pci/driver.py) reserves the units of its devices that are out
  of service (``out_of_service``: disabled, unhealthy, missing, never set, awaiting
  or under cleanup, in error; and allocated with no handle in use: released,
  its cleanup not dispatched yet). Its devices in use are not reserved: Nova's
  allocations count them, and reserving them too would hide a free device of the
  pool for every one in use. Each device keeps its own rule for its binding
  (``refusal``): the bind gives each ARQ a free device of the pool
  (steward/arqs/ops.py). A provider of one deployable is not a pool,
  whatever its driver calls it: the rules above apply.

Read by the bind guard and the release (steward/arqs/device_ops.py) wherever the
ARQ operations run, and by a conductor's report, cleanup and self-healing when
they write a device's state or its reservation (steward/conductor).
"""
import dataclasses

from steward.common import exception
from steward.common import states
from steward.db import deployables as deployable_db
from steward.db import query as db_query

# States in which a device reserves everything even with several accelerators.
WHOLE_DEVICE_OUT = (states.DEV_PENDING_CLEANING, states.DEV_CLEANING, states.DEV_ERROR)


@dataclasses.dataclass(frozen=True)
class Policy:
    device_uuid: str
    hostname: str
    device_state: str
    maintaining: bool
    missing_since: object
    single: bool
    health_fault: str | None = None

    def reserved_for(self, deployable):
        """Placement ``reserved`` for ``deployable`` (anything with
        ``num_accelerators``, its provider's total), or None: leave it as it is."""
        total = deployable.num_accelerators
        if self.maintaining or self.health_fault:
            return total
        if self.device_state is None:
            return None
        if self.single:
            return 0 if self.device_state == states.DEV_AVAILABLE else total
        return total if self.device_state in WHOLE_DEVICE_OUT else 0

    @property
    def refusal(self):
        """Why a binding is refused now (an exception to raise), or None."""
        if self.maintaining:
            return exception.DeviceMaintaining(uuid=self.device_uuid)
        if self.health_fault:
            return exception.DeviceUnhealthy(uuid=self.device_uuid,
                                             fault=self.health_fault)
        if self.missing_since is not None:
            return exception.DeviceMissing(uuid=self.device_uuid, host=self.hostname,
                                           since=db_query.timestamp(self.missing_since),
                                           action='bound')
        allowed = (states.DEV_AVAILABLE,) if self.single else (
            states.DEV_AVAILABLE, states.DEV_ALLOCATED)
        if self.device_state not in allowed:
            return exception.DeviceNotAvailable(
                uuid=self.device_uuid, state=self.device_state or 'not backfilled')
        return None

    @property
    def bindable(self):
        return self.refusal is None

    @property
    def out_of_service(self):
        """Out of its pool: counted in the pool's ``reserved`` (module doc)."""
        return bool(self.maintaining or self.health_fault or
                    self.missing_since is not None or self.device_state is None or
                    self.device_state in WHOLE_DEVICE_OUT)


def provider_reserved(members):
    """Placement ``reserved`` of one provider whose deployables are ``members``,
    [(deployable, the Policy of its device, the device's handles in use)], or
    None: leave it as it is. A provider of one deployable follows its device's
    rule; a pool (several) reserves its members that are out of service, and its
    members allocated with no handle in use: released by their tenant, awaiting
    their cleanup (its agent not reached yet), Nova's allocation gone (module
    doc)."""
    if not members:
        return None
    if len(members) == 1:
        dep, rule, _ = members[0]
        return rule.reserved_for(dep)
    return sum(dep.num_accelerators for dep, rule, in_use in members
               if rule.out_of_service or
               (rule.device_state == states.DEV_ALLOCATED and not in_use))


def members_reserved(session, members):
    """provider_reserved of the rows steward.db.discoveries.provider_members
    returns for one provider: [(deployable, device, the device's accelerators,
    its handles in use)]."""
    return provider_reserved([(dep, policy(session, device, accelerators=count), used)
                              for dep, device, count, used in members])


def policy(session, device, deployables=None, accelerators=None):
    """The rule applied to ``device`` as it is in ``session``; ``deployables``: all
    of the device's deployables when the caller holds them already, or
    ``accelerators``: their sum when the caller read it with the device
    (steward.db.devices.devices_lock_counted, device_release_view); else they are
    counted in the database."""
    if accelerators is not None:
        count = accelerators
    elif deployables is not None:
        count = sum(d.num_accelerators for d in deployables)
    else:
        count = deployable_db.device_accelerators(session, device.id)
    return Policy(device_uuid=device.uuid, hostname=device.hostname,
                  device_state=device.device_state,
                  maintaining=device.status == states.DEVICE_STATUS_MAINTAINING,
                  missing_since=device.missing_since, single=count == 1,
                  health_fault=device.health_fault)

"""An operator's enable and disable of a device (``POST /v2/devices/{uuid}/enable``
and ``/disable``, RPC ``device_set_status``): run by a conductor. The
reservation it writes in Placement is the one rule's (steward/arqs/reservation.py),
read when it is written (steward/arqs/device_ops.py ``current_reserved``)."""
import functools
import logging

from steward.arqs import device_ops
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.db import retry

LOG = logging.getLogger(__name__)


@retry.on_deadlock
def set_status(deps, ctx, device_uuid, status):
    """Enable/disable (maintaining): persist, then reserve or free in Placement."""
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if device.status != status:
            device.status = status
            LOG.info('device %s: status -> %s request_id=%s', device.uuid, status,
                     ctx.request_id)
        deployables = deployable_db.deployable_list(s, {'device_id': device.id})
        for d in deployables:
            s.expunge(d)
    for dep in deployables:
        rc = device_ops.rc_of(deps, dep) if dep.rp_uuid else None
        if rc and device_ops.current_reserved(deps, dep.id) is not None:
            deps.placement().set_reserved(dep.rp_uuid, rc,
                                          functools.partial(device_ops.current_reserved,
                                                            deps, dep.id))

"""What the conductor does with a device's health (issue 38).

A driver reads the hardware's own reports and sends a ``health.Reading`` with each
device it discovers (and the NVMe driver one after each cleanup). ``apply`` stores
it on the device row in the caller's transaction and, when it is unhealthy,
latches ``health_fault``: from then on the reservation rule
(steward/arqs/reservation.py) reserves the device whole in Placement and
refuses every bind, whatever its state.

* available -> error (event ``unhealthy``): nothing was on it;
* allocated, pending_cleaning, cleaning: the state stays (the tenant keeps its
  device, Nova is told nothing; a cleanup in flight finishes), the change is a
  history note and ``last_error``; the release or the cleanup's end then moves it
  to error (``release_unhealthy`` in steward/arqs/device_ops.py, ``unhealthy`` in cleanup_ops);
* error: stays.

A warning changes no state: it is a history note, the metric and the API.
The fault is cleared only by an operator (``clear_fault``, from POST
/v2/devices/{uuid}/clean) once the last reading no longer holds an unhealthy
condition: a condition that came and went is still a device to look at.
"""
import json
import logging

from oslo_utils import timeutils

from steward.common import exception
from steward.common import health
from steward.common import states
from steward.conf import CONF
from steward.db import devices as device_db
from steward.db import host_reports
from steward.db import models as m
from steward.db import query as db_query
from steward.db import transitions

LOG = logging.getLogger(__name__)


def _read_at(reading):
    try:
        return timeutils.normalize_time(timeutils.parse_isotime(reading.read_at))
    except (ValueError, TypeError):
        return timeutils.utcnow()


def stored_conditions(device):
    """The conditions of the device's last reading, as stored."""
    try:
        return json.loads(device.health_conditions or '[]')
    except ValueError:
        return []


def parse(payload, device_uuid=None):
    """A Reading from an agent's payload, or None when it sent none (an agent older
    than health, a driver that reads none) or one this conductor cannot read."""
    if not payload:
        return None
    try:
        return health.Reading.from_dict(payload)
    except (ValueError, KeyError, TypeError) as err:
        LOG.warning('device %s: health reading ignored: %s', device_uuid, err)
        return None


def columns_of_first(reading):
    """The health columns of a device seen for the first time with ``reading``,
    written with its row, when storing them is all ``apply`` would do (an ok
    reading on a new device: no fault, no history note); else None: ``apply``
    it once the row is there."""
    if reading is None or reading.state != health.HEALTH_OK or reading.unhealthy():
        return None
    return {'health': reading.state,
            'health_conditions': json.dumps(
                [{'code': c.code, 'severity': c.severity, 'detail': c.detail}
                 for c in reading.conditions], sort_keys=True),
            'health_read_at': _read_at(reading)}


def apply(session, ctx, device, reading, actor=None):
    """Store ``reading`` on ``device`` (an ORM row in ``session``'s transaction) and
    act on it. Returns True when it took the device out of service just now."""
    if reading is None:
        return False
    before = device.health
    new = reading.state
    conditions = [{'code': c.code, 'severity': c.severity, 'detail': c.detail}
                  for c in reading.conditions]
    device.health = new
    device.health_conditions = json.dumps(conditions, sort_keys=True)
    device.health_read_at = _read_at(reading)
    request_id = getattr(ctx, 'request_id', None)
    faults = reading.unhealthy()
    if faults and device.health_fault is None:
        fault = health.summary(faults)
        device.health_fault = fault
        reason = f'unhealthy: {fault}'
        session.flush()
        if device.device_state == states.DEV_AVAILABLE:
            transitions.advance(session, m.Device, device, states.DEV_ERROR,
                                event='unhealthy', reason=reason,
                                request_id=request_id, actor=actor)
        else:
            # The tenant keeps it; it leaves service when released (device_ops,
            # cleanup_ops). last_error says why it will not be handed out again,
            # unless it is in error already: that error's reason stays (the
            # fault is in its health and its history).
            if device.device_state != states.DEV_ERROR:
                device.last_error = reason
            transitions.note(session, m.Device, device, event='unhealthy',
                             reason=reason, request_id=request_id, actor=actor)
        LOG.warning('device %s (%s on %s, %s): unhealthy, out of service until an '
                    'operator brings it back: %s', device.uuid, device.type,
                    device.hostname, device.device_state, fault)
        return True
    if new != (before or health.HEALTH_OK):
        reason = health.summary(reading.conditions) or 'no condition holds'
        session.flush()
        transitions.note(session, m.Device, device, event=f'health_{new}',
                         reason=reason, request_id=request_id, actor=actor)
        log = LOG.warning if new != health.HEALTH_OK else LOG.info
        log('device %s (%s on %s): health %s -> %s: %s', device.uuid, device.type,
            device.hostname, before, new, reason)
    return False


def check_recoverable(device):
    """Raise unless an operator may bring ``device`` back: its last reading holds
    no unhealthy condition (the fault, if any, has cleared)."""
    if device.health == health.HEALTH_UNHEALTHY:
        held = [c for c in stored_conditions(device)
                if c.get('severity') == health.HEALTH_UNHEALTHY]
        raise exception.DeviceStillUnhealthy(
            uuid=device.uuid,
            conditions='; '.join(c.get('code', '?') for c in held) or device.health_fault,
            read_at=db_query.timestamp(device.health_read_at) or 'never')


def clear_fault(session, ctx, device):
    """An operator brings the device back (check_recoverable passed): the fault
    latch goes, in the transaction that moves the device out of error."""
    if device.health_fault is None:
        return
    LOG.info('device %s: health fault cleared by %s (was: %s)', device.uuid,
             states.actor_of(ctx), device.health_fault)
    device.health_fault = None


def reading_time(text):
    """A report's newest reading time (report_digest.newest_read_at: ISO 8601
    text, or None) as the database stores it; None when there is none."""
    return _read_at(health.Reading(read_at=text)) if text else None


def refresh_read_at(database, host, newest, written):
    """A report unchanged but for its readings' times: the readings still hold, read
    again at ``newest`` (report_digest.newest_read_at; None: nothing to refresh).
    ``written``: the newest reading time the host's devices hold, as the host's
    report digest row has it (digests.StoredDigests). Written (the devices and
    that row, one transaction) only once ``newest`` is [health] read_at_refresh
    seconds past it, so a quiet host costs nothing in between, whichever
    conductor takes its reports. Returns the time written, or None."""
    newest = reading_time(newest)
    if newest is None:
        return None
    if written is not None and \
            (newest - written).total_seconds() < CONF.health.read_at_refresh:
        return None
    with database.writer() as s:
        device_db.devices_health_read(s, host, newest, CONF.health.read_at_refresh)
        host_reports.health_read(s, host, newest)
    return newest

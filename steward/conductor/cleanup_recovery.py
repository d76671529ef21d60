"""Cleanups that did not end the way they should (spec 1, "Timeout and Crash
Recovery"): what an agent reconciles when it starts, and what the conductor's
periodic tasks heal (steward/conductor/periodic.py). Nothing is stuck for good:

* cleaning, or pending_cleaning with a cleanup started: the agent that ran it
  restarted without reporting an end -> error (interrupted);
* pending_cleaning with no cleanup started since it entered it: the request to
  the agent was lost -> cleaned now (at agent start) or asked again (periodic);
* allocated with no active ARQ: a release whose cleanup was never asked for ->
  pending_cleaning, cleaned;
* no progress for [nvme] cleanup_timeout + [conductor] cleanup_grace -> error
  (cyb.cleanup.stuck).
"""
import logging

from oslo_utils import timeutils

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.common import states
from steward.conductor import cleanup_ops
from steward.db import attributes as attribute_db
from steward.db import device_history as history_db
from steward.db import devices as device_db
from steward.db import discoveries
from steward.db import erase_records as erase_db
from steward.db import models as m
from steward.db import query as db_query
from steward.db import retry
from steward.db import transitions

LOG = logging.getLogger(__name__)


# --- agent start ------------------------------------------------------------------
def cleanup_started(s, device):
    """Has a cleanup of ``device`` (in pending_cleaning) started since it entered
    that state? False means the request to its agent was lost."""
    if erase_db.erase_record_list(s, device.uuid, limit=1, status='running'):
        return True
    entered = history_db.device_entered(s, device.uuid, states.DEV_PENDING_CLEANING)
    since = entered.created_at if entered is not None else device.updated_at
    last = erase_db.erase_record_list(s, device.uuid, limit=1)
    return bool(last and since is not None and last[0].started_at is not None
                and last[0].started_at >= since)


def recovery_info(deps, ctx, host):
    """What an agent starting on ``host`` must reconcile: cleanups it did not see
    finish (cleaning, or pending_cleaning with a cleanup started: interrupted),
    cleanups it was asked for but never started (pending_cleaning with none
    started: the request was lost, ``lost``), cleanable devices allocated without
    an active ARQ (a missed cleanup), and Placement reservations that disagree
    with device_state."""
    interrupted, lost, missed, checks = [], [], [], []
    with deps.database.reader() as s:
        for device in device_db.devices_in_states(s, host, (states.DEV_PENDING_CLEANING,
                                                     states.DEV_CLEANING)):
            if device.device_state == states.DEV_PENDING_CLEANING and \
                    not cleanup_started(s, device):
                lost.append(cleanup_ops.payload(s, device))
            else:
                interrupted.append(cleanup_ops.payload(s, device))
        for device in device_db.devices_in_states(s, host, (states.DEV_ALLOCATED,)):
            if device_ops.supports_cleaning(device) and \
                    not device_db.device_has_active_arq(s, device.id):
                missed.append(cleanup_ops.payload(s, device))
        rows = discoveries.host_deployables(s, host)
        attrs = attribute_db.attributes_by_deployable(s, [d.id for d, _ in rows])
        # Per provider (a pool's is one for all its devices, issue 52), named by
        # its first device, as reservation.provider_reserved counts it.
        members = discoveries.provider_members(s, {d.rp_uuid for d, _ in rows if d.rp_uuid})
        for rp, found in members.items():
            dep, device, _, _ = found[0]
            rc = next((a.value for a in attrs.get(dep.id, ()) if a.key == 'rc'), None)
            want = reservation.members_reserved(s, found)
            if rc and want is not None:
                checks.append((device.uuid, device.device_state, rp, rc, want))
    mismatches = []
    placement = deps.placement_client
    if placement is not None:
        for device_uuid, state, rp, rc, want in checks:
            try:
                inv = placement.get_inventory(rp).get(rc)
            except exception.StewardError as err:
                LOG.warning('Reservation check of %s skipped: %s', rp, err)
                continue
            if inv is not None and inv.get('reserved') != want:
                mismatches.append({'device_uuid': device_uuid, 'device_state': state,
                                   'rp_uuid': rp, 'resource_class': rc,
                                   'reserved': inv.get('reserved'), 'expected': want})
    return {'interrupted': interrupted, 'lost': lost, 'missed': missed,
            'mismatches': mismatches}


@retry.on_deadlock
def fail_interrupted(deps, ctx, device_uuid, reason):
    """A cleanup the agent did not see finish (it was restarted): -> error, with
    what the hardware says recorded in the erase record."""
    code = 'cyb.cleanup.interrupted'
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if device.device_state not in (states.DEV_PENDING_CLEANING, states.DEV_CLEANING):
            return {'device_state': device.device_state, 'applied': False}
        deployables = cleanup_ops.fail_device(s, device, f'{code}: {reason}', ctx,
                                       actor=cleanup_ops.agent_actor(device.hostname))
        action = cleanup_ops.board_of(device).get('cleanup_action')
        now = timeutils.utcnow()
        running = erase_db.erase_record_list(s, device_uuid, status='running')
        message = f'agent restarted during cleanup; {reason}'
        for rec in running:
            transitions.advance(s, m.EraseRecord, rec, states.ERASE_INTERRUPTED,
                                event='interrupt', values=erase_db.erase_values(dict(
                               finished_at=now, error_code=code, error_message=message,
                               assurance_level='none')))
            deps.metrics.cleanup_ended(rec.action, 'interrupted')
        if not running:
            erase_db.erase_record_create(s, device_uuid, hostname=device.hostname,
                                         trigger='recovery', status='interrupted',
                                         action=action, started_at=now, finished_at=now,
                                         error_code=code, error_message=message,
                                         assurance_level='none')
            deps.metrics.cleanup_ended(action, 'interrupted')
    cleanup_ops.reserve_whole(deps, deployables, True)
    return {'device_state': states.DEV_ERROR, 'applied': True}


@retry.on_deadlock
def recover_missed(deps, ctx, device_uuid):
    """allocated with no active ARQ -> pending_cleaning; the agent then cleans it."""
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if device_db.device_has_active_arq(s, device.id):
            raise exception.Conflict(reason=f'device {device_uuid} has an active ARQ')
        transitions.advance(s, m.Device, device, states.DEV_PENDING_CLEANING,
                            event='recover_missed_cleanup', reason='allocated without an ARQ',
                            request_id=ctx.request_id,
                            actor=cleanup_ops.agent_actor(device.hostname))
        return cleanup_ops.payload(s, device)


# --- from the conductor's periodic tasks ---------------------------------------------
# How each way into pending_cleaning names the cleanup it asks for.
TRIGGER_OF_EVENT = {'release_for_cleaning': 'unbind', 'operator_clean': 'operator',
                    'recover_missed_cleanup': 'recovery'}


def last_progress(s, device):
    """(when the cleanup of ``device`` last showed progress, its running erase
    record or None): the newest of the device's and the record's updates, which
    the agent's progress reports touch."""
    running = erase_db.erase_record_list(s, device.uuid, limit=1, status='running')
    rec = running[0] if running else None
    stamps = [device.updated_at, device.created_at]
    if rec is not None:
        stamps += [rec.updated_at, rec.started_at, rec.created_at]
    return max(t for t in stamps if t is not None), rec


def _step(rec):
    if rec is None:
        return 'none: the agent never started it'
    return ' '.join(p for p in (rec.phase or 'starting', None if rec.progress is None
                                else f'{rec.progress:g} %') if p)


@retry.on_deadlock
def fail_stuck(deps, ctx, device_uuid, limit, now=None):
    """pending_cleaning or cleaning with no progress for ``limit`` seconds -> error,
    its running erase record failed with cyb.cleanup.stuck, reserved = total.
    Returns True when this call moved it."""
    now = now or timeutils.utcnow()
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if device.device_state not in (states.DEV_PENDING_CLEANING, states.DEV_CLEANING):
            return False
        since, rec = last_progress(s, device)
        if (now - since).total_seconds() <= limit:
            return False
        err = exception.CleanupStuck(device=device_uuid, since=db_query.timestamp(since),
                                     step=_step(rec))
        deployables = cleanup_ops.fail_device(s, device, str(err), ctx)
        action = cleanup_ops.board_of(device).get('cleanup_action')
        values = dict(finished_at=now, error_code=err.code, error_message=str(err),
                      assurance_level='none')
        if rec is not None:
            action = rec.action or action
            transitions.advance(s, m.EraseRecord, rec, states.ERASE_FAILED, event='fail',
                                values=erase_db.erase_values(values))
        else:
            # No attempt ran: the record still tells auditors why the device failed.
            erase_db.erase_record_create(s, device_uuid, hostname=device.hostname,
                                         trigger='recovery', action=action, started_at=now,
                                         status=states.ERASE_FAILED, **values)
    LOG.error('device %s: %s; moved to error (re-clean with POST /v2/devices/%s/clean)',
              device_uuid, err, device_uuid)
    cleanup_ops.reserve_whole(deps, deployables, True)
    deps.metrics.cleanup_ended(action, 'failed', rec.started_at if rec else None, now)
    return True

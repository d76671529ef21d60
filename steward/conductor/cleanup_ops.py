"""Device cleanup on the conductor side (spec 1): asking a released device's agent
to clean it (once it answers ping), the operator's re-clean, the transitions agents
ask for while they clean (agents reach the database only through here), erase
records, and the plan ("what would a clean do, and why"). Cleanups that went wrong
are healed by cleanup_recovery.py.

States move only through ``transitions.advance`` and each transition checks the state it
expects, so a late answer (a cleanup that finishes after its timeout moved the device
to error, a duplicate cast) cannot undo a newer decision: it is recorded and ignored.
Placement follows the state: reserved = total for every state but available.
"""
import json
import logging

import oslo_messaging as messaging
from oslo_utils import timeutils

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.common import states
from steward.conductor import health_ops
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.db import erase_records as erase_db
from steward.db import models as m
from steward.db import query as db_query
from steward.db import retry
from steward.db import transitions
from steward.conf import CONF

LOG = logging.getLogger(__name__)

CLEANUP_RPC = '1.1'
RECORD_COLUMNS = ('serial', 'model', 'firmware', 'capabilities', 'action',
                  'assurance_level', 'sstat', 'sstat_text', 'verification',
                  'verification_detail', 'pci_address', 'capability_decision')
RESULT_NOT_DETAILS = frozenset(RECORD_COLUMNS) | {'sprog'}


def board_of(device):
    try:
        board = json.loads(device.std_board_info or '{}')
    except ValueError:
        return {}
    return board if isinstance(board, dict) else {}


def payload(s, device):
    from steward.agent import rpcapi as agent_rpcapi
    return agent_rpcapi.device_payload(device, device_db.device_driver_name(s, device.id))


def _single_deployables(s, device):
    deployables = deployable_db.deployable_list(s, {'device_id': device.id})
    if not reservation.policy(s, device, deployables).single:
        return []
    for d in deployables:
        s.expunge(d)
    return deployables


def reserve_whole(deps, deployables, reserve):
    """Returns False when Placement could not be brought in line (the next report
    of the host retries: see the caller)."""
    ok = True
    for dep in deployables:
        try:
            device_ops.reserve(deps, dep, reserve=reserve)
        except exception.StewardError as err:
            LOG.error('Placement reservation of %s (reserve=%s) failed: %s',
                      dep.rp_uuid, reserve, err)
            ok = False
    return ok


def fail_device(s, device, reason, ctx=None, actor=None):
    transitions.advance(s, m.Device, device, states.DEV_ERROR, event='fail', reason=reason,
                        request_id=getattr(ctx, 'request_id', None), actor=actor)
    return _single_deployables(s, device)


def agent_actor(host):
    return f'agent {host}'


def agent_answers(deps, ctx, host):
    """Does ``host``'s agent answer ping within [conductor] agent_ping_timeout?
    What it answers also tells its RPC version."""
    api = deps.agent_api
    try:
        answer = api.ping(ctx, host, timeout=CONF.conductor.agent_ping_timeout)
    except messaging.MessagingException as err:
        return False, err
    api.record_host_version(host, (answer or {}).get('version') or '1.0')
    return True, None


def release_for_cleaning(deps, ctx, device_uuid, recovery=False):
    """A device that needs cleaning lost its last accelerator request (an unbind
    committed, or a periodic task found one): if its agent answers, allocated ->
    pending_cleaning and cleanup_device is cast; if not, it stays allocated and
    reserved (its agent's start-up recovery, or the next periodic run, cleans it).
    ``recovery``: the periodic task found the release, not an unbind. Returns True
    when the cleanup was asked for."""
    with deps.database.reader() as s:
        device = device_db.device_get(s, device_uuid)
        if not _released(s, device):
            return False
        host, missing = device.hostname, device.missing_since
    if missing is not None:
        LOG.warning('device %s is missing from discovery on %s since %s; it stays '
                    'allocated and reserved and is cleaned once it is back',
                    device_uuid, host, missing.isoformat())
        return False
    alive, err = agent_answers(deps, ctx, host)
    if not alive:
        LOG.warning('device %s needs cleaning but the agent of %s is unreachable (%s); '
                    'it stays allocated and reserved and will be cleaned when its agent '
                    'starts', device_uuid, host, type(err).__name__)
        return False
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if not _released(s, device):
            return False
        reason = 'no accelerator request holds it'
        if recovery:
            transitions.advance(s, m.Device, device, states.DEV_PENDING_CLEANING,
                                event='recover_missed_cleanup', reason=reason,
                                request_id=ctx.request_id)
        else:
            transitions.advance(s, m.Device, device, states.DEV_PENDING_CLEANING,
                                event='release_for_cleaning', reason=reason,
                                request_id=ctx.request_id)
    return dispatch(deps, ctx, device_uuid,
                    trigger='recovery' if recovery else 'unbind')


def dispatch_cleanup(deps, ctx, device_uuid):
    """Ask the agent of a device an ARQ operation released to clean it: the
    ``dispatch_cleanup`` a conductor hands its ARQService (steward/arqs/service.py),
    its periodic tasks and an API process's cast (device_release_for_cleaning)
    end here. Never raises: the release stands (it is committed); the device
    stays reserved, and the conductor's periodic tasks or the agent's next start
    finish its cleanup."""
    try:
        release_for_cleaning(deps, ctx, device_uuid)
    except (exception.StewardError, messaging.MessagingException) as err:
        LOG.error('device %s: cleanup could not be dispatched: %s', device_uuid, err)


def _released(s, device):
    """Allocated, cleanable, and no handle or active request holds it."""
    return (device.device_state == states.DEV_ALLOCATED
            and device_ops.supports_cleaning(device)
            and not device_db.device_handles_in_use(s, device.id)
            and not device_db.device_has_active_arq(s, device.id))


# --- from the conductor itself (unbind) and the API (operator) -----------------------
def dispatch(deps, ctx, device_uuid, trigger='unbind'):
    """Ask the device's agent to clean it (device in pending_cleaning). An agent too
    old for cleanup_device leaves the device in error: never handed out uncleaned."""
    with deps.database.reader() as s:
        device = device_db.device_get(s, device_uuid)
        host, device_dict = device.hostname, payload(s, device)
    api = deps.agent_api
    if not api.can_send_version(CLEANUP_RPC, host=host):
        err = exception.AgentTooOld(host=host, feature='cleanup_device',
                                    version=CLEANUP_RPC)
        LOG.error('device %s needs cleaning but %s; moving it to error', device_uuid, err)
        with deps.database.writer() as s:
            device = device_db.device_get(s, device_uuid)
            deployables = fail_device(s, device, f'{err.code}: {err}', ctx)
            erase_db.erase_record_create(s, device_uuid, hostname=host, trigger=trigger,
                                         status='failed', started_at=timeutils.utcnow(),
                                         finished_at=timeutils.utcnow(),
                                         action=board_of(device).get('cleanup_action'),
                                         error_code=err.code, error_message=str(err))
        reserve_whole(deps, deployables, True)
        deps.metrics.cleanup_ended(board_of(device).get('cleanup_action'),
                                      'not_dispatched')
        return False
    api.cleanup_device(ctx, host, device_dict, trigger=trigger)
    LOG.info('device %s: cleanup_device cast to the agent of %s (%s)', device_uuid, host,
             trigger)
    return True


def operator_clean(deps, ctx, device_uuid):
    """POST /v2/devices/{uuid}/clean: error -> pending_cleaning, then dispatch.
    400 cannot clean / agent too old, 404, 409 any state but error."""
    with deps.database.reader() as s:
        device = device_db.device_get(s, device_uuid)
        _check_cleanable(device)
        host = device.hostname
        cleanable = device_ops.supports_cleaning(device)
    if not cleanable:
        return _operator_return(deps, ctx, device_uuid)
    if not deps.agent_api.can_send_version(CLEANUP_RPC, host=host):
        raise exception.AgentTooOld(host=host, feature='cleanup_device (device clean)',
                                    version=CLEANUP_RPC)
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        _check_cleanable(device)
        # Its cleanup reads the health again: a drive still failing goes back
        # to error once it is cleaned.
        health_ops.clear_fault(s, ctx, device)
        transitions.advance(s, m.Device, device, states.DEV_PENDING_CLEANING,
                            event='operator_clean', reason='POST /clean',
                            request_id=ctx.request_id, actor=states.actor_of(ctx))
    try:
        dispatch(deps, ctx, device_uuid, trigger='operator')
    except messaging.MessagingException as err:
        # Nobody was asked: put the device back where the operator found it.
        with deps.database.writer() as s:
            device = device_db.device_get(s, device_uuid)
            if device.device_state == states.DEV_PENDING_CLEANING:
                fail_device(s, device, f'cleanup_device could not be sent: {err}', ctx)
        raise exception.ServiceUnavailable(service=f'the agent of {host}',
                                           reason=str(err))


@retry.on_deadlock
def _operator_return(deps, ctx, device_uuid):
    """POST /clean of a device that needs no cleaning, in error for its health
    (issue 38): nothing to erase; back to available once the condition cleared."""
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        _check_cleanable(device)
        fault = device.health_fault
        health_ops.clear_fault(s, ctx, device)
        transitions.advance(s, m.Device, device, states.DEV_AVAILABLE,
                            event='operator_clean',
                            reason=f'POST /clean: nothing to erase; was {fault or "error"}',
                            request_id=ctx.request_id, actor=states.actor_of(ctx))
        deployables = deployable_db.deployable_list(s, {'device_id': device.id})
        for d in deployables:
            s.expunge(d)
    # Every deployable, shared ones too: the rule now asks for 0 everywhere.
    reserve_whole(deps, deployables, False)


def _check_cleanable(device):
    if not device_ops.supports_cleaning(device) and \
            device.device_state == states.DEV_ERROR and device.health_fault:
        # Out of service for its health (issue 38): nothing to erase, it comes
        # back once the condition has cleared.
        _check_present(device)
        health_ops.check_recoverable(device)
        return
    if not device_ops.supports_cleaning(device):
        cleanable = ', '.join(sorted(device_ops.CLEANABLE_TYPES))
        raise exception.DeviceCannotClean(
            uuid=device.uuid, reason=f'devices of type {device.type} are not cleaned '
                                     f'(only {cleanable})')
    _check_present(device)
    if device.device_state != states.DEV_ERROR:
        raise exception.DeviceCleaningConflict(uuid=device.uuid,
                                               state=device.device_state or 'not backfilled')
    health_ops.check_recoverable(device)
    board = board_of(device)
    if not board.get('cleanup_action'):
        reason = (board.get('cleanup') or {}).get('reason') or \
            'no cleanup action was locked in at discovery'
        raise exception.DeviceCannotClean(uuid=device.uuid, reason=reason)


def _check_present(device):
    if device.missing_since is not None:
        raise exception.DeviceMissing(uuid=device.uuid, host=device.hostname,
                                      since=db_query.timestamp(device.missing_since),
                                      action='cleaned')


def plan(deps, ctx, device_uuid):
    """What POST /clean would run on the device and why; executes nothing."""
    from steward.drivers.nvme import policy as nvme_policy
    with deps.database.reader() as s:
        device = device_db.device_get(s, device_uuid)
        board = board_of(device)
        last = erase_db.erase_record_list(s, device_uuid, limit=1)
        last = erase_db.erase_record_record(last[0]) if last else None
    cleanup = board.get('cleanup') or {}
    action = board.get('cleanup_action')
    out = {'device_uuid': device.uuid, 'device_state': device.device_state,
           'type': device.type, 'hostname': device.hostname,
           'pci_address': board.get('pci_address'),
           'cleanup_action': action,
           'assurance_level': nvme_policy.ASSURANCE.get(action),
           'policy': {'clear_action': cleanup.get('clear_action'),
                      'clear_strategy': cleanup.get('clear_strategy')},
           'capabilities': cleanup.get('capabilities'),
           'reason': cleanup.get('reason'),
           'steps': nvme_policy.steps_for(action, cleanup.get('identify')),
           'identify': cleanup.get('identify'),
           'last_erase_record': last}
    try:
        _check_cleanable(device)
        out['accepted'], out['refusal'] = True, None
    except exception.StewardError as err:
        out['accepted'], out['refusal'] = False, {'code': err.code, 'message': str(err)}
    return out


# --- from the agent, while it cleans ----------------------------------------------
@retry.on_deadlock
def start(deps, ctx, device_uuid, host, trigger):
    """pending_cleaning -> cleaning and a running erase record. Raises
    InvalidStateTransition when the device is not pending_cleaning (a duplicate or
    stale request): the agent then does nothing."""
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        if device.hostname != host:
            raise exception.Invalid(reason=f'device {device_uuid} belongs to '
                                           f'{device.hostname}, not {host}')
        transitions.advance(s, m.Device, device, states.DEV_CLEANING, event='start_cleaning',
                            request_id=ctx.request_id, actor=agent_actor(host))
        board = board_of(device)
        rec = erase_db.erase_record_create(
            s, device_uuid, hostname=host, trigger=trigger, status='running',
            action=board.get('cleanup_action'), pci_address=board.get('pci_address'),
            started_at=timeutils.utcnow(), phase='starting')
        return {'device': payload(s, device), 'erase_record': rec.uuid}


@retry.on_deadlock
def progress(deps, ctx, record_uuid, phase, percent, detail):
    with deps.database.writer() as s:
        rec = erase_db.erase_record_get(s, record_uuid)
        if rec.status == 'running':
            erase_db.erase_record_update(s, record_uuid, phase=phase, progress=percent,
                                         progress_detail=detail)


def _result_values(record):
    record = dict(record or {})
    values = {k: record[k] for k in RECORD_COLUMNS if k in record}
    values['details'] = {k: v for k, v in record.items() if k not in RESULT_NOT_DETAILS}
    if 'sprog' in record:
        values['details']['sprog'] = record['sprog']
    return values


@retry.on_deadlock
def finish(deps, ctx, device_uuid, record_uuid, succeeded, record, error_code=None,
           error_message=None):
    """cleaning -> available (reserved 0) or error (reserved total). Returns
    {'device_state', 'applied', 'placement_ok'}; ``applied`` is False when the device
    had already left cleaning (timed out, recovered): the result is only recorded."""
    now = timeutils.utcnow()
    record = dict(record or {})
    # The health the driver read once the cleanup ended (NVMe: the SMART log).
    reading = health_ops.parse(record.pop('health', None), device_uuid)
    values = _result_values(record)
    values.update(finished_at=now)
    if succeeded:
        values.update(phase='done', progress=100.0, error_code=None, error_message=None)
    else:
        values.update(error_code=error_code, error_message=error_message,
                      assurance_level='none')
    with deps.database.writer() as s:
        device = device_db.device_get(s, device_uuid)
        rec = erase_db.erase_record_get(s, record_uuid)
        if device.device_state != states.DEV_CLEANING or \
                rec.status != states.ERASE_RUNNING:
            LOG.warning('device %s: cleanup result (%s) arrived while the device is %s; '
                        'recorded, state unchanged', device_uuid,
                        'succeeded' if succeeded else error_code, device.device_state)
            if rec.status == states.ERASE_RUNNING:
                if succeeded:
                    transitions.advance(s, m.EraseRecord, rec, states.ERASE_INTERRUPTED,
                                        event='interrupt', values=erase_db.erase_values(values))
                else:
                    transitions.advance(s, m.EraseRecord, rec, states.ERASE_FAILED,
                                        event='fail', values=erase_db.erase_values(values))
                deps.metrics.cleanup_ended(rec.action, 'late', rec.started_at, now)
            return {'device_state': device.device_state, 'applied': False,
                    'placement_ok': True}
        health_ops.apply(s, ctx, device, reading, actor=agent_actor(device.hostname))
        if device.health_fault:
            # Issue 38: the erase record of a device out of service for its health
            # says so (it was cleaned all the same).
            values['details']['device_unhealthy'] = device.health_fault
        if reading is not None:
            values['details']['health_after'] = reading.to_dict()
        if succeeded:
            transitions.advance(s, m.EraseRecord, rec, states.ERASE_SUCCEEDED, event='succeed',
                                values=erase_db.erase_values(values))
        else:
            transitions.advance(s, m.EraseRecord, rec, states.ERASE_FAILED, event='fail',
                                values=erase_db.erase_values(values))
        if succeeded and device.health_fault:
            # Cleaned, and never handed out again: read unhealthy (issue 38).
            transitions.advance(s, m.Device, device, states.DEV_ERROR, event='unhealthy',
                                reason=f'{values.get("action")} verified; unhealthy: '
                                       f'{device.health_fault}',
                                request_id=ctx.request_id, actor=agent_actor(device.hostname))
            deployables = _single_deployables(s, device)
        elif succeeded:
            transitions.advance(s, m.Device, device, states.DEV_AVAILABLE, event='cleaned',
                                reason=f'{values.get("action")} verified',
                                request_id=ctx.request_id, actor=agent_actor(device.hostname))
            deployables = _single_deployables(s, device)
        else:
            reason = ': '.join(p for p in (error_code or 'cleanup failed', error_message)
                               if p)
            deployables = fail_device(s, device, reason, ctx, actor=agent_actor(device.hostname))
        state = device.device_state
    ok = reserve_whole(deps, deployables, state != states.DEV_AVAILABLE)
    deps.metrics.cleanup_ended(values.get('action') or rec.action,
                          'succeeded' if succeeded else 'failed', rec.started_at, now)
    return {'device_state': state, 'applied': True, 'placement_ok': ok}

"""Devices: ``/v2/devices``."""
from steward.api import handlers
from steward.api import microversion
from steward.api import views
from steward.common import exception
from steward.common import health
from steward.common import states
from steward.db import device_history as history_db
from steward.db import devices as device_db
from steward.db import erase_records as erase_db

# Exact-match filters, applied in SQL (device_db.device_list); device_state from 2.5.
FILTERS = ('uuid', 'id', 'type', 'vendor', 'model', 'hostname', 'status')
FILTERS_2_5 = FILTERS + ('device_state',)
FILTERS_2_8 = FILTERS_2_5 + ('health',)
MAX_LIMIT = 2 ** 31
UPSTREAM_FILTERS = ('type', 'vendor', 'hostname')


def list_devices(req):
    """200 {"devices": [...]}; 400 unknown filter or health value; 403."""
    req.policy.authorize(req.ctx, 'cyborg:device:get_all')
    if req.version >= microversion.DEVICE_HEALTH:
        allowed = FILTERS_2_8
    elif req.version >= microversion.DEVICE_STATE:
        allowed = FILTERS_2_5
    else:
        allowed = FILTERS
    filters = req.query_args(allowed, ints=('id',))
    if 'health' in filters and filters['health'] not in health.HEALTH_STATES:
        raise exception.InvalidParameter(
            name='health', value=filters['health'],
            reason=f'expected one of {", ".join(health.HEALTH_STATES)}')
    # Upstream's own parameters are ignored when empty (``if type:``).
    filters = {k: v for k, v in filters.items() if v != '' or k not in UPSTREAM_FILTERS}
    with req.database.reader() as s:
        rows = device_db.device_records(s, filters)
    return handlers.encoded_response(views.devices_json(req, rows))


def get_device(req):
    """200 device; 403; 404 (also not a UUID, as upstream)."""
    req.policy.authorize(req.ctx, 'cyborg:device:get_one')
    uuid = handlers.uuid_or_not_found(exception.DeviceNotFound, 'Device',
                                      req.params['uuid'])
    with req.database.reader() as s:
        return handlers.json_response(views.device(req, device_db.device_get(s, uuid)))


def _set_status(req, rule, status):
    req.policy.authorize(req.ctx, rule)
    req.query_args(())
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    req.conductor.device_set_status(req.ctx, uuid, status)
    return handlers.empty(200)


def enable(req):
    """200 (no body): status enabled; 400; 403 (admin only); 404."""
    return _set_status(req, 'cyborg:device:enable', states.DEVICE_STATUS_ENABLED)


def disable(req):
    """200 (no body): status maintaining; 400; 403 (admin only); 404."""
    return _set_status(req, 'cyborg:device:disable', states.DEVICE_STATUS_MAINTAINING)


def clean(req):
    """202 (no body): the device goes error -> pending_cleaning and its agent
    re-runs the locked-in cleanup action. 400 not a UUID, device cannot clean
    (``cyb.device.cannot_clean``) or its agent is too old (``cyb.rpc.agent_too_old``);
    403 (admin only); 404 (also below 2.5: app.SINCE); 409 not in error
    (``cyb.cleaning.in_progress``) or its driver still reads it unhealthy
    (``cyb.device.still_unhealthy``); 503 the agent could not be asked. A device
    that needs no cleaning, in error for a health fault, goes back to available."""
    req.policy.authorize(req.ctx, 'cyborg:device:clean')
    req.query_args(())
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    req.conductor.device_clean(req.ctx, uuid)
    return handlers.empty(202)


def clean_plan(req):
    """200 what a clean would run and why (nothing is executed); 400; 403 (admin
    only); 404 (also below 2.5)."""
    req.policy.authorize(req.ctx, 'cyborg:device:clean_plan')
    req.query_args(())
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    return handlers.json_response(req.conductor.device_clean_plan(req.ctx, uuid))


def erase_records(req):
    """200 {"erase_records": [...]} newest first (``?limit=N``); a running one
    carries the cleanup's phase and progress. Records outlive their device. 400;
    403; 404 (no such device and no records, or below 2.5)."""
    req.policy.authorize(req.ctx, 'cyborg:device:erase_records')
    limit = req.query_args(('limit',), ints=('limit',)).get('limit')
    if limit is not None and limit < 1:
        raise exception.InvalidParameter(name='limit', value=limit,
                                         reason='a positive integer is expected')
    if limit is not None:
        # More than any database holds is all of them (SQLite refuses a LIMIT
        # beyond 64 bits).
        limit = min(limit, MAX_LIMIT)
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    with req.database.reader() as s:
        rows = erase_db.erase_record_list(s, uuid, limit=limit)
        if not rows:
            device_db.device_get(s, uuid)
        return handlers.json_response({'erase_records': [
            views.erase_record(req, erase_db.erase_record_record(r)) for r in rows]})


def history(req):
    """200 {"history": [...]} oldest first: every device_state change with its
    event, reason, request id and who made it. Like erase records it outlives the
    device. 400; 403; 404 (no such device and no history, or below 2.6)."""
    req.policy.authorize(req.ctx, 'cyborg:device:history')
    req.query_args(())
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    with req.database.reader() as s:
        rows = history_db.device_history_list(s, uuid)
        if not rows:
            device_db.device_get(s, uuid)
        return handlers.json_response({'history': [
            views.device_history(req, history_db.device_history_record(r)) for r in rows]})

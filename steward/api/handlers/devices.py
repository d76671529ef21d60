"""Devices: ``/v2/devices``."""
from steward.api import handlers
from steward.api import policy
from steward.api import views
from steward.common import states
from steward.db import api as db
from steward.db import session

# Exact-match filters, applied in SQL (db.device_list).
FILTERS = ('uuid', 'id', 'type', 'vendor', 'model', 'hostname', 'status')


def list_devices(req):
    """200 {"devices": [...]}; 400 unknown filter; 403."""
    policy.authorize(req.ctx, 'cyborg:device:get_all')
    filters = req.query_args(FILTERS)
    if 'id' in filters:
        filters['id'] = handlers.int_arg('id', filters['id'])
    with session.reader() as s:
        rows = db.device_list(s, filters)
        return handlers.json_response(
            {'devices': [views.device(req, r) for r in rows]})


def get_device(req):
    """200 device; 400 not a UUID; 403; 404."""
    policy.authorize(req.ctx, 'cyborg:device:get_one')
    uuid = handlers.check_uuid('device uuid', req.params['uuid'])
    with session.reader() as s:
        return handlers.json_response(views.device(req, db.device_get(s, uuid)))


def _set_status(req, rule, status):
    policy.authorize(req.ctx, rule)
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

"""Device profiles: ``/v2/device_profiles``.

Profiles are pure data: created and deleted here in one database transaction,
without the conductor.
"""
from oslo_utils import uuidutils

from steward.api import handlers
from steward.api import microversion
from steward.api import views
from steward.api.schemas import device_profile as schema
from steward.common import exception
from steward.db import device_profiles as profile_db


def _names(value):
    names = [n.strip() for n in value.split(',') if n.strip()]
    if not names:
        raise exception.InvalidQuery(reason='give at least one device profile name')
    return list(dict.fromkeys(names))


def list_profiles(req):
    """200 {"device_profiles": [...]}, optionally ``?name=a,b`` (exact names);
    400 unknown parameter; 403."""
    req.policy.authorize(req.ctx, 'cyborg:device_profile:get_all')
    args = req.query_args(('name',))
    names = _names(args['name']) if 'name' in args else None
    with req.database.single_read() as conn:
        rows = profile_db.device_profile_records(conn, names)
        return handlers.json_response({'device_profiles': views.device_profiles(req, rows)})


def get_profile(req):
    """200 {"device_profile": DP} by UUID, or by name from 2.2; 403; 404; 406
    name lookup below 2.2."""
    req.policy.authorize(req.ctx, 'cyborg:device_profile:get_one')
    key = req.params['name_or_uuid']
    with req.database.reader() as s:
        if uuidutils.is_uuid_like(key):
            row = profile_db.device_profile_get(s, uuid=key)
        else:
            microversion.require(req.version, microversion.DP_GET_BY_NAME,
                                 'Looking a device profile up by name')
            row = profile_db.device_profile_get(s, name=key)
        return handlers.json_response({'device_profile': views.device_profile(req, row)})


def create_profile(req):
    """201 bare DP; 400 bad body (not a list of exactly one, bad name or group);
    403 (admin only); 409 duplicate name or uuid."""
    req.policy.authorize(req.ctx, 'cyborg:device_profile:create')
    req.query_args(())
    dp = schema.parse_create(req.json())
    if 'uuid' in dp:
        handlers.check_uuid('uuid', dp['uuid'])
    with req.database.writer() as s:
        row = profile_db.device_profile_create(s, dp['name'], dp['groups'],
                                               description=dp.get('description'),
                                               uuid=dp.get('uuid'))
        return handlers.json_response(views.device_profile(req, row), status=201)


def _delete(req, uuid=None, names=()):
    """All or nothing: every profile must exist (404) and be unused (409)."""
    with req.database.writer() as s:
        if uuid is not None:
            rows = [profile_db.device_profile_get(s, uuid=uuid)]
        else:
            rows = [profile_db.device_profile_get(s, name=n) for n in names]
        for row in rows:
            profile_db.device_profile_delete(s, row)
    return handlers.empty(204)


def delete_profile(req):
    """204; 403 (admin only); 404; 409 used by accelerator requests.
    The path segment is a UUID or a comma-separated list of names."""
    req.policy.authorize(req.ctx, 'cyborg:device_profile:delete')
    req.query_args(())
    key = req.params['name_or_uuid']
    if uuidutils.is_uuid_like(key):
        return _delete(req, uuid=key)
    return _delete(req, names=_names(key))


def delete_profiles(req):
    """``DELETE /v2/device_profiles?value=n1,n2``: 204; 400 without ``value``;
    403; 404; 409."""
    req.policy.authorize(req.ctx, 'cyborg:device_profile:delete')
    args = req.query_args(('value',))
    if 'value' not in args:
        raise exception.InvalidQuery(
            reason='give the profiles to delete as ?value=<name>[,<name>...]')
    return _delete(req, names=_names(args['value']))

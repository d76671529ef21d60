"""Accelerator requests (ARQs): ``/v2/accelerator_requests``.

Every change is an ARQ operation, run through ``req.arqs`` (steward/arqs/api.py:
the ARQService of this process, steward/arqs/service.py, or the conductors over
RPC, as the composition root chose); reads come straight from the database,
scoped to the caller's project unless the caller is an admin or a service
(upstream defect 7: cross-tenant ARQs). Everything a request carries is
validated before anything is asked to change.
"""
from steward.api import handlers
from steward.api import schemas
from steward.api import views
from steward.api.schemas import arq as schema
from steward.common import exception
from steward.common import states
from steward.db import arqs as arq_db

BIND_STATE_RESOLVED = 'resolved'


def _render(req, records, status=200):
    return handlers.json_response({'arqs': [views.arq(req, r) for r in records]},
                                  status=status)


def create_arqs(req):
    """201 {"arqs": [...]}, one ARQ per accelerator the profile asks for; 400
    bad body; 403; 404 unknown device profile (also "" or a name too long to
    exist)."""
    ctx = req.ctx
    req.policy.authorize(ctx, 'cyborg:arq:create')
    req.query_args(())
    body = schemas.validate(schema.CREATE_V2_0, req.json())
    name = body['device_profile_name']
    if not name or len(name) > 255 or '\x00' in name:
        # No profile has such a name (upstream looks it up and answers 404);
        # PostgreSQL would refuse the NUL in the query.
        raise exception.DeviceProfileNotFound(resource='Device Profile', key='name',
                                              value=name)
    records = req.arqs.arq_create(ctx, body['device_profile_name'], ctx.project_id)
    return _render(req, records, status=201)


def list_arqs(req):
    """200 {"arqs": [...]}; ``?instance=<uuid>``; ``?bind_state=resolved``.

    With both: 423 (empty body) while any ARQ of the instance is not resolved
    (Bound, BindFailed or Deleting), else all of its ARQs. ``resolved`` alone
    lists the resolved ARQs. 400 bad instance UUID, other bind_state or unknown
    parameter; 403.
    """
    ctx = req.ctx
    req.policy.authorize(ctx, 'cyborg:arq:get_all')
    args = req.query_args(('instance', 'bind_state'))
    instance = args.get('instance')
    if instance is not None:
        handlers.check_uuid('instance', instance)
    bind_state = args.get('bind_state')
    if bind_state is not None and bind_state != BIND_STATE_RESOLVED:
        raise exception.InvalidParameter(name='bind_state', value=bind_state,
                                         reason="only 'resolved' is supported")
    scope = handlers.project_scope(ctx)
    with req.database.single_read() as conn:
        if instance is not None and bind_state:
            records = arq_db.arq_records(conn, project_id=scope, instance_uuid=instance)
            if any(r['state'] not in states.ARQ_RESOLVED for r in records):
                return handlers.empty(423)
        else:
            records = arq_db.arq_records(
                conn, project_id=scope, instance_uuid=instance,
                states_in=states.ARQ_RESOLVED if bind_state else None)
    return _render(req, records)


def get_arq(req):
    """200 bare ARQ; 400 not a UUID; 403; 404 (also another project's ARQ)."""
    req.policy.authorize(req.ctx, 'cyborg:arq:get_one')
    req.query_args(())
    uuid = handlers.check_uuid('accelerator request uuid', req.params['uuid'])
    with req.database.single_read() as conn:
        record = arq_db.arq_get_record(conn, uuid, handlers.project_scope(req.ctx))
    return handlers.json_response(views.arq(req, record))


def _binding(ctx, arq_uuid, ops):
    paths = [op['path'] for op in ops]
    missing = [p for p in schema.BIND_PATHS if p not in paths]
    if missing:
        raise exception.PatchInvalid(
            reason='Fields absent in patch: ' + ', '.join(p[1:] for p in missing))
    binding = {'uuid': arq_uuid}
    for op in ops:
        if 'value' not in op:
            raise exception.PatchInvalid(reason=f'add {op["path"]} needs a value')
        binding[op['path'][1:]] = op['value']
    handlers.check_uuid('instance_uuid', binding['instance_uuid'])
    handlers.check_uuid('device_rp_uuid', binding['device_rp_uuid'])
    if not binding['hostname'].strip():
        raise exception.PatchInvalid(reason='hostname must not be blank')
    if 'project_id' in binding and not ctx.is_admin:
        raise exception.Forbidden(
            action='cyborg:arq:update (only admins may set /project_id)')
    return binding


def _parse_patch(req, body):
    """([binding dicts], [uuids to unbind]) of a keyed PATCH body, or 400/403."""
    schemas.validate(schemas.for_version(req.version, schema.PATCH_VERSIONS), body)
    bindings, unbinds = [], []
    for arq_uuid, ops in body.items():
        handlers.check_uuid('accelerator request uuid', arq_uuid)
        kinds = {op['op'] for op in ops}
        if len(kinds) != 1:
            raise exception.PatchInvalid(
                reason=f'the operations on {arq_uuid} must be all add or all remove')
        paths = [op['path'] for op in ops]
        if len(set(paths)) != len(paths):
            raise exception.PatchInvalid(
                reason=f'a path appears twice in the operations on {arq_uuid}')
        if kinds == {'add'}:
            bindings.append(_binding(req.ctx, arq_uuid, ops))
            continue
        if any('value' in op for op in ops):
            raise exception.PatchInvalid(reason='remove takes no value')
        if '/project_id' in paths:
            raise exception.PatchInvalid(reason='/project_id cannot be removed')
        unbinds.append(arq_uuid)
    if bindings and unbinds:
        raise exception.PatchInvalid(
            reason='one request either binds (add) or unbinds (remove) ARQs, not both')
    return bindings, unbinds


def _patch(req, only=None):
    ctx = req.ctx
    req.policy.authorize(ctx, 'cyborg:arq:update')
    if not ctx.is_service:
        raise exception.ServiceTokenRequired()
    req.query_args(())
    body = req.json()
    bindings, unbinds = _parse_patch(req, body)
    if only is not None and set(body) != {only}:
        raise exception.PatchInvalid(
            reason=f'the body must be keyed by the ARQ of the URL ({only}) only')
    if bindings:
        with req.metrics.bind_timer():
            req.arqs.arq_bind(ctx, bindings)
    else:
        req.arqs.arq_unbind(ctx, unbinds)
    return handlers.empty(202)


def patch_arqs(req):
    """Bind (all ``add``) or unbind (all ``remove``) the ARQs keyed in the body:
    202 (empty body). 400 bad body (nothing changed); 403 no service token,
    or /project_id set by a non-admin; 404 unknown ARQ or device RP; 409
    device not bindable or no free attach handle."""
    return _patch(req)


def patch_arq(req):
    """Same as ``patch_arqs``, at ``/v2/accelerator_requests/{uuid}`` where
    openstacksdk and OSC send it; the body must name that ARQ only."""
    uuid = handlers.check_uuid('accelerator request uuid', req.params['uuid'])
    return _patch(req, only=uuid)


def _arq_uuids(value):
    """``?arqs=`` as upstream reads it: each item is looked up as it is, so one
    that is not a UUID names no ARQ (404, nothing deleted); none at all is 400."""
    items = [v.strip() for v in value.split(',') if v.strip()]
    if not items:
        raise exception.InvalidQuery(reason='arqs needs at least one UUID')
    for item in items:
        handlers.uuid_or_not_found(exception.ARQNotFound, 'Accelerator request', item)
    return list(dict.fromkeys(items))


def delete_arqs(req):
    """``?arqs=u1,u2`` (all must exist: 404, nothing deleted, also for an item
    that is not a UUID, as upstream) or ``?instance=`` (idempotent, needs a
    service token): 204. 400 neither or both, a bad instance UUID; 403."""
    ctx = req.ctx
    req.policy.authorize(ctx, 'cyborg:arq:delete')
    args = req.query_args(('arqs', 'instance'))
    if ('arqs' in args) == ('instance' in args):
        raise exception.InvalidQuery(
            reason='give either arqs=<uuid>[,<uuid>...] or instance=<uuid>')
    scope = handlers.project_scope(ctx)
    if 'instance' in args:
        instance = handlers.check_uuid('instance', args['instance'])
        if not ctx.is_service:
            raise exception.ServiceTokenRequired()
        req.arqs.arq_delete(ctx, instance_uuid=instance, project_id=scope)
    else:
        uuids = _arq_uuids(args['arqs'])
        req.arqs.arq_delete(ctx, arq_uuids=uuids, project_id=scope)
    return handlers.empty(204)


def delete_arq(req):
    """``DELETE /v2/accelerator_requests/{uuid}`` = ``?arqs=<uuid>``: 204; 400;
    403; 404 (also a segment that is not a UUID, as upstream)."""
    ctx = req.ctx
    req.policy.authorize(ctx, 'cyborg:arq:delete')
    req.query_args(())
    uuid = _arq_uuids(req.params['uuid'])[0]
    req.arqs.arq_delete(ctx, arq_uuids=[uuid], project_id=handlers.project_scope(ctx))
    return handlers.empty(204)

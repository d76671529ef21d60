"""Deployables: ``/v2/deployables``."""
from steward.api import handlers
from steward.api import views
from steward.api.schemas import deployable as schema
from steward.api import schemas
from steward.common import exception
from steward.db import attributes as attribute_db
from steward.db import deployables as deployable_db

FILTERS = ('uuid', 'name', 'num_accelerators', 'device_id', 'rp_uuid', 'driver_name',
           'parent_id', 'root_id')
INT_FILTERS = ('num_accelerators', 'device_id', 'parent_id', 'root_id')


def _render(req, s, rows):
    attrs = attribute_db.attribute_pairs_by_deployable(s, [r.id for r in rows])
    return views.deployables(req, [deployable_db.deployable_record(r) for r in rows], attrs)


def list_deployables(req):
    """200 {"deployables": [...]}; 400 unknown filter; 403."""
    req.policy.authorize(req.ctx, 'cyborg:deployable:get_all')
    filters = req.query_args(FILTERS, ints=INT_FILTERS)
    with req.database.reader() as s:
        rows = deployable_db.deployable_records(s, filters)
        # Without a filter, every deployable's attributes: read without an IN list
        # of thousands of ids.
        attrs = attribute_db.attribute_pairs_by_deployable(
            s, [r['id'] for r in rows] if filters else None)
    return handlers.encoded_response(views.deployables_json(req, rows, attrs))


def _get(req, uuid):
    with req.database.reader() as s:
        return _render(req, s, [deployable_db.deployable_get(s, uuid)])[0]


def get_deployable(req):
    """200 deployable; 400 not a UUID; 403; 404."""
    req.policy.authorize(req.ctx, 'cyborg:deployable:get_one')
    uuid = handlers.check_uuid('deployable uuid', req.params['uuid'])
    return handlers.json_response(_get(req, uuid))


def program(req):
    """200 deployable after programming; 400 bad body or not programmable; 403
    (admin only); 404.

    Also served at ``/v2/deployables/{uuid}/program/{uuid}``, the path
    openstacksdk builds (the uuid twice); both must then be the same.
    """
    req.policy.authorize(req.ctx, 'cyborg:deployable:program')
    uuid = handlers.check_uuid('deployable uuid', req.params['uuid'])
    again = req.params.get('again')
    if again is not None and again != uuid:
        raise exception.InvalidParameter(
            name='path', value=again,
            reason=f'the deployable is named twice and differently ({uuid})')
    body = schemas.validate(schema.PROGRAM_V2_0, req.json())
    image_uuid = handlers.check_uuid('image_uuid', body[0]['value'][0]['image_uuid'])
    with req.database.reader() as s:
        deployable_db.deployable_get(s, uuid)      # 404 before asking the conductor
    req.conductor.deployable_program(req.ctx, uuid, image_uuid)
    return handlers.json_response(_get(req, uuid))

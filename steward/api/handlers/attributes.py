"""Attributes of deployables: ``/v2/attributes``."""
from steward.api import handlers
from steward.api import schemas
from steward.api import views
from steward.api.schemas import attribute as schema
from steward.common import exception
from steward.db import attributes as attribute_db

FILTERS = ('uuid', 'deployable_id', 'key', 'value')


def list_attributes(req):
    """200 {"attributes": [...]}; 400 unknown filter; 403."""
    req.policy.authorize(req.ctx, 'cyborg:attribute:get_all')
    filters = req.query_args(FILTERS, ints=('deployable_id',))
    if filters.get('key') == '':
        del filters['key']          # upstream: ``if key:``
    with req.database.reader() as s:
        rows = attribute_db.attribute_list(s, filters)
        return handlers.json_response(
            {'attributes': [views.attribute(req, r) for r in rows]})


def get_attribute(req):
    """200 attribute; 400 not a UUID; 403; 404."""
    req.policy.authorize(req.ctx, 'cyborg:attribute:get_one')
    uuid = handlers.check_uuid('attribute uuid', req.params['uuid'])
    with req.database.reader() as s:
        return handlers.json_response(views.attribute(req, attribute_db.attribute_get(s, uuid)))


def create_attribute(req):
    """201 bare attribute; 400 bad body; 403 (admin only); 404 unknown deployable.

    The body is ``{"deployable_id", "key", "value"}``, bare (upstream) or wrapped
    in ``{"attribute": {...}}`` (openstacksdk)."""
    req.policy.authorize(req.ctx, 'cyborg:attribute:create')
    req.query_args(())
    body = req.json()
    if isinstance(body, dict) and list(body) == ['attribute']:
        body = body['attribute']
    schemas.validate(schema.CREATE_V2_0, body)
    with req.database.writer() as s:
        row = attribute_db.attribute_create(s, int(body['deployable_id']), body['key'],
                                            body['value'])
        return handlers.json_response(views.attribute(req, row), status=201)


def delete_attribute(req):
    """204; 403 (admin only); 404 (also not a UUID, as upstream)."""
    req.policy.authorize(req.ctx, 'cyborg:attribute:delete')
    req.query_args(())
    uuid = handlers.uuid_or_not_found(exception.AttributeNotFound, 'Attribute',
                                      req.params['uuid'])
    with req.database.writer() as s:
        attribute_db.attribute_delete(s, uuid)
    return handlers.empty(204)

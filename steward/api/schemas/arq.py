"""Accelerator request bodies: create and the bind/unbind PATCH."""
import copy

from steward.api import microversion
from steward.api import schemas

CREATE = {
    'type': 'object',
    'properties': {
        # Any string: a name no profile can have ("", longer than 255) is a 404
        # "device profile not found", as upstream answers (the handler).
        'device_profile_name': {'type': 'string'},
        # python-cyborgclient 3.0.0 (`openstack accelerator arq create`) always
        # sends the key, null unless --group-id is given. Only null is taken: a
        # value would be ignored (the ARQs cover every group of the profile), and
        # ignoring it silently is what upstream does wrong.
        'device_profile_group_id': {'type': 'null'},
    },
    'required': ['device_profile_name'],
    'additionalProperties': False,
}
CREATE_V2_0 = schemas.compile(CREATE)

BIND_PATHS = ['/hostname', '/device_rp_uuid', '/instance_uuid']

# One RFC 6902 operation. Which ops may be combined (all add or all remove, add
# needs all three paths, remove takes no value) is checked by the handler, which
# can say so in words.
_OP = {
    'type': 'object',
    'properties': {
        'op': {'enum': ['add', 'remove']},
        'path': {'enum': BIND_PATHS},
        'value': {'type': 'string', 'minLength': 1, 'maxLength': 255},
    },
    'required': ['op', 'path'],
    'additionalProperties': False,
}

# Keyed by ARQ uuid (checked by the handler for a clean message).
PATCH = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': {'type': 'array', 'minItems': 1, 'maxItems': 8,
                             'items': _OP},
}
PATCH_V2_0 = schemas.compile(PATCH)

# 2.1 (ARQ_BIND_PROJECT_ID): a bind may also set /project_id.
PATCH_2_1 = copy.deepcopy(PATCH)
PATCH_2_1['additionalProperties']['items']['properties']['path']['enum'].append(
    '/project_id')
PATCH_V2_1 = schemas.compile(PATCH_2_1)

PATCH_VERSIONS = [(microversion.INITIAL, PATCH_V2_0),
                  (microversion.ARQ_BIND_PROJECT_ID, PATCH_V2_1)]

"""Deployable bodies: the program PATCH."""
from steward.api import schemas

PROGRAM = {
    'type': 'array',
    'minItems': 1,
    'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'op': {'const': 'replace'},
            'path': {'const': '/program'},
            'value': {
                'type': 'array', 'minItems': 1, 'maxItems': 1,
                'items': {
                    'type': 'object',
                    'properties': {'image_uuid': {'type': 'string',
                                                  'pattern': schemas.UUID_PATTERN}},
                    'required': ['image_uuid'],
                    'additionalProperties': False,
                },
            },
        },
        'required': ['op', 'path', 'value'],
        'additionalProperties': False,
    },
}
PROGRAM_V2_0 = schemas.compile(PROGRAM)

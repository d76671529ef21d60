"""Attribute bodies: POST /v2/attributes, bare or wrapped in {"attribute": ...}."""
from steward.api import schemas

CREATE = {
    'type': 'object',
    'properties': {
        # openstacksdk passes what it is given; OSC's CLI gives a string.
        'deployable_id': {'oneOf': [{'type': 'integer', 'minimum': 1},
                                    {'type': 'string', 'pattern': '^[1-9][0-9]*$'}]},
        'key': {'type': 'string', 'minLength': 1, 'maxLength': 255},
        'value': {'type': 'string', 'maxLength': 65535},
    },
    'required': ['deployable_id', 'key', 'value'],
    'additionalProperties': False,
}
CREATE_V2_0 = schemas.compile(CREATE)

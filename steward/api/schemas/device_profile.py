"""Device profile bodies: POST /v2/device_profiles takes a list of exactly one."""
import copy
import re

from steward.api import schemas
from steward.common import exception
from steward.db import device_profiles as profile_db

NAME_PATTERN = '^[a-zA-Z0-9-_]+$'

_GROUP = {
    'type': 'object',
    'minProperties': 1,
    'additionalProperties': {'type': ['string', 'integer']},
}

DEVICE_PROFILE = {
    'type': 'object',
    'properties': {
        'name': {'type': 'string', 'minLength': 1, 'maxLength': 255},
        'description': {'type': ['string', 'null'], 'maxLength': 4096},
        'uuid': {'type': 'string', 'pattern': schemas.UUID_PATTERN},
        'groups': {'type': 'array', 'minItems': 1, 'items': _GROUP},
    },
    'required': ['name', 'groups'],
    'additionalProperties': False,
}

CREATE = {'type': 'array', 'minItems': 1, 'maxItems': 1, 'items': DEVICE_PROFILE}
CREATE_V2_0 = schemas.compile(CREATE)

# Resource classes a profile may ask for besides CUSTOM_* (upstream's list).
STANDARD_RESOURCES = frozenset(['FPGA', 'GPU', 'VGPU', 'PGPU', 'CUSTOM_QAT',
                                'CUSTOM_NIC', 'CUSTOM_SSD'])
TRAIT_VALUES = ('required', 'forbidden')
PREFIXES = ('resources:', 'trait:', 'accel:')


def _amount(key, value):
    if isinstance(value, bool):
        value = None
    try:
        amount = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        amount = None
    if amount is None or amount < 1:
        raise exception.DeviceProfileInvalid(
            reason=f'{key} must be a positive integer, got {value!r}')
    return amount


def normalise_groups(groups):
    """Check the group keys as upstream does (and a little more) and return the
    groups with whitespace around resource class and trait names stripped.

    * every key starts with ``resources:``, ``trait:`` or ``accel:``;
    * ``trait:`` names start with ``CUSTOM_``, values are required|forbidden;
    * ``resources:`` classes are standard (STANDARD_RESOURCES) or ``CUSTOM_*``,
      amounts are integers >= 1;
    * every group asks for at least one resource: a group without one would
      produce no accelerator request and a request group Placement cannot match;
    * the amounts together are at most profile_db.MAX_ACCELERATORS.
    """
    result, total = [], 0
    for index, group in enumerate(groups):
        out = {}
        for key, value in group.items():
            prefix, sep, name = key.partition(':')
            prefix += sep
            if prefix not in PREFIXES:
                raise exception.DeviceProfileInvalid(
                    reason=f'unsupported group key {key!r}: keys start with '
                           f'{", ".join(PREFIXES)}')
            name = name.strip()
            if not name:
                raise exception.DeviceProfileInvalid(reason=f'empty name in key {key!r}')
            if prefix == 'trait:':
                if not name.startswith('CUSTOM_'):
                    raise exception.DeviceProfileInvalid(
                        reason=f'unsupported trait name {name!r}: it must start '
                               f'with CUSTOM_')
                if value not in TRAIT_VALUES:
                    raise exception.DeviceProfileInvalid(
                        reason=f'trait {name} must be "required" or "forbidden", '
                               f'got {value!r}')
            elif prefix == 'resources:':
                if name not in STANDARD_RESOURCES and not name.startswith('CUSTOM_'):
                    raise exception.DeviceProfileInvalid(
                        reason=f'unsupported resource class {name!r}: use one of '
                               f'{", ".join(sorted(STANDARD_RESOURCES))} or CUSTOM_*')
                total += _amount(key, value)
            elif not isinstance(value, str):
                raise exception.DeviceProfileInvalid(
                    reason=f'{key} must be a string, got {value!r}')
            normalised = prefix + name
            if normalised in out:
                raise exception.DeviceProfileInvalid(
                    reason=f'key {normalised!r} appears twice in group {index}')
            out[normalised] = value
        if not any(k.startswith('resources:') for k in out):
            raise exception.DeviceProfileInvalid(
                reason=f'group {index} asks for no resources:<class> amount')
        result.append(out)
    if total > profile_db.MAX_ACCELERATORS:
        raise exception.DeviceProfileInvalid(
            reason=f'the groups ask for {total} accelerators together, more than '
                   f'{profile_db.MAX_ACCELERATORS}')
    return result


def check_name(name):
    # fullmatch: '$' alone would accept a trailing newline.
    if not re.fullmatch(NAME_PATTERN, name):
        raise exception.DeviceProfileInvalid(
            reason=f'name {name!r} must match {NAME_PATTERN}')


def parse_create(body):
    """The one profile of a POST body, validated and normalised."""
    if not isinstance(body, list) or len(body) != 1:
        raise exception.DeviceProfileInvalid(
            reason='Only one device profile allowed per POST request for now.')
    schemas.validate(CREATE_V2_0, body)
    dp = copy.deepcopy(body[0])
    check_name(dp['name'])
    dp['groups'] = normalise_groups(dp['groups'])
    return dp

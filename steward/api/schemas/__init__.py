"""JSON Schemas of request bodies, one module per resource.

Schemas are strict (``additionalProperties: false``: an unknown key is an error,
never silently ignored as upstream did with ``device_profile_group_id``). Where a
body differs between microversions, the later schema is derived from the earlier
one by deepcopy, with a comment naming the version, and ``for_version()`` picks
one. Validators are compiled once, at import.
"""
import jsonschema
from jsonschema import exceptions as js_exc

from steward.common import exception

UUID_PATTERN = '^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$'
_MAX_REASON = 300


def compile(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def for_version(version, versioned):
    """``versioned``: [(min Version, validator)], oldest first."""
    chosen = versioned[0][1]
    for min_version, validator in versioned:
        if version >= min_version:
            chosen = validator
    return chosen


def _where(error):
    return ''.join(f'/{p}' for p in error.absolute_path)


def validate(validator, data):
    """Raise SchemaViolation (400) with a short, clean reason."""
    error = js_exc.best_match(validator.iter_errors(data))
    if error is None:
        return data
    reason = error.message
    if len(reason) > _MAX_REASON:
        reason = reason[:_MAX_REASON] + '...'
    where = _where(error)
    raise exception.SchemaViolation(reason=f'{reason} (at {where})' if where else reason)

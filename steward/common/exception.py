"""Every error Steward raises, each with an HTTP status and a stable code.

Codes are namespaced (``cyb.<area>.<what>``), documented, and never reused for a
different meaning: scripts and operators match on them. The API error handler
(steward/api/errors.py) turns any StewardError into one JSON document; nothing
else in the code builds error responses.
"""


class StewardError(Exception):
    """Base class. ``message`` is a format string filled from the kwargs."""

    status = 500
    code = 'cyb.internal'
    message = 'An unexpected error occurred.'

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.message % kwargs if kwargs else self.message
            except (KeyError, TypeError, ValueError):
                message = self.message
        self.msg = message
        super().__init__(message)

    def __str__(self):
        return self.msg


# 400 ------------------------------------------------------------------------------
class Invalid(StewardError):
    status = 400
    code = 'cyb.invalid'
    message = 'Invalid input: %(reason)s'


class MalformedJSON(Invalid):
    code = 'cyb.request.malformed_json'
    message = 'Request is not in valid JSON format.'


class SchemaViolation(Invalid):
    code = 'cyb.request.schema'
    message = 'Invalid request body: %(reason)s'


class InvalidParameter(Invalid):
    code = 'cyb.request.invalid_parameter'
    message = 'Invalid value %(value)r for %(name)s: %(reason)s'


class InvalidUUID(Invalid):
    code = 'cyb.request.invalid_uuid'
    message = 'Expected a UUID for %(name)s but received %(value)r.'


class DeviceProfileInvalid(Invalid):
    code = 'cyb.device_profile.invalid'
    message = 'Invalid device profile: %(reason)s'


class PatchInvalid(Invalid):
    code = 'cyb.arq.patch_invalid'
    message = 'Invalid ARQ patch: %(reason)s'


class ARQAlreadyBoundToInstance(Invalid):
    code = 'cyb.arq.instance_already_bound'
    message = ('Instance %(instance_uuid)s already has bound accelerator requests; '
               'accelerators cannot be added to an existing instance.')


class ARQBadState(Invalid):
    # Upstream answered 500 here; a wrong state is the caller's mistake.
    code = 'cyb.arq.bad_state'
    message = ('Accelerator request %(uuid)s is %(state)s; %(action)s needs one of '
               '%(expected)s.')


class NotProgrammable(Invalid):
    code = 'cyb.deployable.not_programmable'
    message = 'Deployable %(uuid)s cannot be programmed: %(reason)s'


class DeviceCannotClean(Invalid):
    code = 'cyb.device.cannot_clean'
    message = 'Device %(uuid)s cannot be cleaned: %(reason)s'


class InvalidConfiguration(StewardError):
    """Raised at service start; not an API error."""
    status = 500
    code = 'cyb.config.invalid'
    message = 'Invalid configuration: %(reason)s'


# 401/403 --------------------------------------------------------------------------
class NotAuthenticated(StewardError):
    status = 401
    code = 'cyb.auth.unauthenticated'
    message = 'Authentication required.'


class Forbidden(StewardError):
    status = 403
    code = 'cyb.auth.forbidden'
    message = 'Access was denied to the following resource: %(action)s'


class ServiceTokenRequired(Forbidden):
    code = 'cyb.auth.service_token_required'
    message = ('This operation requires a service token. Use the Compute API to '
               'manage instance accelerators.')


# 404 ------------------------------------------------------------------------------
class NotFound(StewardError):
    status = 404
    code = 'cyb.not_found'
    message = 'Resource could not be found.'


class ResourceNotFound(NotFound):
    code = 'cyb.resource.not_found'
    message = '%(resource)s not found with %(key)s=%(value)s'


class DeviceNotFound(ResourceNotFound):
    code = 'cyb.device.not_found'


class DeployableNotFound(ResourceNotFound):
    code = 'cyb.deployable.not_found'


class AttributeNotFound(ResourceNotFound):
    code = 'cyb.attribute.not_found'


class DeviceProfileNotFound(ResourceNotFound):
    code = 'cyb.device_profile.not_found'


class ARQNotFound(ResourceNotFound):
    code = 'cyb.arq.not_found'


class PathNotFound(NotFound):
    code = 'cyb.request.path_not_found'
    message = 'The resource could not be found: %(path)s'


# 405/406 --------------------------------------------------------------------------
class MethodNotAllowed(StewardError):
    status = 405
    code = 'cyb.request.method_not_allowed'
    message = 'Method %(method)s is not allowed on %(path)s.'


class NotAcceptable(StewardError):
    status = 406
    code = 'cyb.microversion.not_acceptable'
    message = ('Version %(version)s is not supported by the API. Minimum is '
               '%(min_version)s and maximum is %(max_version)s.')


class FeatureNotAvailable(StewardError):
    status = 406
    code = 'cyb.microversion.feature_unavailable'
    message = '%(feature)s needs microversion %(needed)s or later; %(served)s was requested.'


# 409/423 --------------------------------------------------------------------------
class Conflict(StewardError):
    status = 409
    code = 'cyb.conflict'
    message = 'Conflict: %(reason)s'


class DuplicateDeviceProfileName(Conflict):
    code = 'cyb.device_profile.duplicate_name'
    message = 'A device profile named %(name)s already exists.'


class DuplicateUUID(Conflict):
    code = 'cyb.resource.duplicate_uuid'
    message = 'A %(resource)s with uuid %(uuid)s already exists.'


class DeviceProfileInUse(Conflict):
    code = 'cyb.device_profile.in_use'
    message = ('Device profile %(name)s is used by %(count)d accelerator request(s); '
               'delete them first.')


class NoFreeAttachHandle(Conflict):
    code = 'cyb.bind.no_free_handle'
    message = 'Deployable %(deployable)s has no free attach handle.'


class DeviceNotAvailable(Conflict):
    code = 'cyb.bind.device_not_available'
    message = 'Device %(uuid)s is %(state)s, not available; it cannot be bound.'


class DeviceMaintaining(Conflict):
    code = 'cyb.bind.device_maintaining'
    message = 'Device %(uuid)s is disabled (maintaining); it cannot be bound.'


class InvalidStateTransition(Conflict):
    code = 'cyb.state.invalid_transition'
    message = '%(kind)s %(uuid)s cannot go from %(current)s to %(target)s.'


class ConcurrentUpdate(Conflict):
    code = 'cyb.state.concurrent_update'
    message = '%(kind)s %(uuid)s was changed by another request; retry.'


class DeviceCleaningConflict(Conflict):
    code = 'cyb.cleaning.in_progress'
    message = 'Device %(uuid)s is %(state)s; cleaning can only be requested in error.'


class ARQUnresolved(StewardError):
    status = 423
    code = 'cyb.arq.unresolved'
    message = 'Accelerator requests of instance %(instance)s are still binding.'


# 5xx / service-side ---------------------------------------------------------------
class PlacementError(StewardError):
    status = 502
    code = 'cyb.placement.error'
    message = 'Placement call %(call)s failed: %(reason)s'


class PlacementProviderNotFound(PlacementError):
    code = 'cyb.placement.compute_node_missing'
    message = ('No compute-node resource provider named %(name)s in Placement; the '
               'agent of host %(host)s reports under that name. Set [agent] '
               'resource_provider_name to the name Nova uses.')


class PlacementOwnershipConflict(PlacementError):
    status = 409
    code = 'cyb.placement.not_owned'
    message = ('Resource provider %(name)s exists without OWNER_CYBORG; another '
               'service owns it.')


class ServiceUnavailable(StewardError):
    status = 503
    code = 'cyb.service.unavailable'
    message = '%(service)s is unavailable: %(reason)s'


class RPCVersionCapped(StewardError):
    status = 409
    code = 'cyb.rpc.version_capped'
    message = ('This operation needs RPC version %(version)s, above the cap set in '
               '[upgrade_levels] (%(cap)s); finish the rolling upgrade first.')


class AgentTooOld(StewardError):
    status = 400
    code = 'cyb.rpc.agent_too_old'
    message = 'The agent of host %(host)s does not support %(feature)s (needs RPC %(version)s).'


# Placement client and embedded Placement (steward/placement) ----------------------
class PlacementProviderUuidConflict(PlacementError):
    status = 409
    code = 'cyb.placement.uuid_conflict'
    message = ('Resource provider %(name)s exists with uuid %(existing)s, not '
               '%(uuid)s; delete the stale provider or rename the device.')


class PlacementProviderInUse(PlacementError):
    status = 409
    code = 'cyb.placement.provider_in_use'
    message = ('Resource provider %(uuid)s still has allocations; it cannot be '
               'deleted until its consumers release it.')


class EmbeddedPlacementError(StewardError):
    status = 503
    code = 'cyb.placement.embedded_failed'
    message = 'Embedded Placement on %(host)s:%(port)s: %(reason)s'


class PlacementGenerationConflict(PlacementError):
    """Placement's 409 placement.concurrent_update, after the client's retries."""
    status = 409
    code = 'cyb.placement.generation_conflict'


# REST API (steward/api) -----------------------------------------------------------
class InvalidQuery(Invalid):
    code = 'cyb.request.invalid_query'
    message = 'Invalid query string: %(reason)s'


class RequestTooLarge(StewardError):
    status = 413
    code = 'cyb.request.too_large'
    message = 'The request body is larger than %(limit)d bytes.'

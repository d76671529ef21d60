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


class BodyTooDeep(Invalid):
    code = 'cyb.request.too_deep'
    message = 'The request body nests deeper than %(limit)d levels.'


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
    message = ('Instance %(instance_uuid)s already has bound accelerator requests on '
               'host %(host)s; accelerators cannot be added to an existing instance '
               '(a second set binds only on another host, while the instance moves).')


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


class SchemaTooOld(StewardError):
    """Raised at service start: the database lacks migrations this release needs
    (steward/cmd/root.py ``Root.sync_database``); not an API error."""
    status = 500
    code = 'cyb.db.schema_too_old'
    message = ('the database schema is %(state)s. Run "steward-manage db sync" '
               '(or "steward db sync") with this release, then start steward '
               '%(service)s again (it does not migrate at start unless [database] '
               'sync_on_startup = true).')


# 401/403 --------------------------------------------------------------------------
class NotAuthenticated(StewardError):
    status = 401
    code = 'cyb.auth.unauthenticated'
    message = 'Authentication required.'


class Forbidden(StewardError):
    status = 403
    code = 'cyb.auth.forbidden'
    message = 'Access was denied to the following resource: %(action)s'


class NoauthNotLoopback(StewardError):
    """auth_strategy = noauth and a request that reached a listener on a routable
    address (a hosting server's bind is only known per request)."""
    status = 403
    code = 'cyb.auth.noauth_not_loopback'
    message = ('[api] auth_strategy = noauth serves loopback listeners only; this '
               'request reached %(address)s. Set [api] auth_strategy = keystone '
               '(or [api] allow_insecure_noauth = true to accept every caller as '
               'an admin).')


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


# 415 ------------------------------------------------------------------------------
class UnsupportedMediaType(StewardError):
    status = 415
    code = 'cyb.request.unsupported_media_type'
    message = ('The media type %(media_type)s is not supported, use application/json '
               '(UTF-8).')


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


class PoolExhausted(Conflict):
    code = 'cyb.bind.pool_exhausted'
    message = ('Provider %(rp_uuid)s is a pool of %(devices)d device(s) with %(free)d '
               'free for this bind, which asks %(asked)d of it; it cannot be bound.')


class DeviceMaintaining(Conflict):
    code = 'cyb.bind.device_maintaining'
    message = 'Device %(uuid)s is disabled (maintaining); it cannot be bound.'


class DeviceUnhealthy(Conflict):
    code = 'cyb.bind.device_unhealthy'
    message = ('Device %(uuid)s is out of service for its health (%(fault)s); it '
               'cannot be bound.')


class DeviceStillUnhealthy(Conflict):
    code = 'cyb.device.still_unhealthy'
    message = ('Device %(uuid)s cannot be brought back: its driver still reads it '
               'unhealthy (%(conditions)s, read %(read_at)s). Replace or reset the '
               'device and wait for the next discovery.')


class InvalidStateTransition(Conflict):
    code = 'cyb.state.invalid_transition'
    message = '%(kind)s %(uuid)s cannot go from %(current)s to %(target)s.'


class ConcurrentUpdate(Conflict):
    code = 'cyb.state.concurrent_update'
    message = '%(kind)s %(uuid)s was changed by another request; retry.'


class DeviceCleaningConflict(Conflict):
    code = 'cyb.cleaning.in_progress'
    message = 'Device %(uuid)s is %(state)s; cleaning can only be requested in error.'


class DeviceMissing(Conflict):
    code = 'cyb.device.missing'
    message = ('Device %(uuid)s has not been discovered on %(host)s since %(since)s; '
               'it cannot be %(action)s until its agent reports it again.')


class ARQUnresolved(StewardError):
    status = 423
    code = 'cyb.arq.unresolved'
    message = 'Accelerator requests of instance %(instance)s are still binding.'


# 5xx / service-side ---------------------------------------------------------------
class PlacementError(StewardError):
    status = 502
    code = 'cyb.placement.error'
    message = 'Placement call %(call)s failed: %(reason)s'


class PlacementUnavailable(PlacementError):
    """Placement did not answer (refused, timed out, no endpoint) or answered that
    it cannot serve now (502, 503, 504): an outage the client may retry, not a
    bug. A PlacementError still, for the callers that handle those."""
    status = 503
    code = 'cyb.service.unavailable'


class PlacementProviderNotFound(PlacementError):
    code = 'cyb.placement.compute_node_missing'
    message = ('No compute-node resource provider named %(name)s in Placement; the '
               'agent of host %(host)s reports under that name. Set [agent] '
               'resource_provider_name to the name Nova uses (or [placement] '
               'create_compute_node = true where no Nova creates it).')


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


# Device cleanup (steward/drivers, steward/agent/cleanup.py) -----------------------
# One class per fault. The code lands in the device's erase record (``error_code``)
# where operators and scripts match on it; the message says what to look at. Raised
# by drivers' cleanup and the agent's cleanup executor, never answered by the API.
class CleanupFailed(StewardError):
    code = 'cyb.cleanup.failed'
    message = 'Cleanup of device %(device)s failed: %(reason)s'


class FormatFailed(CleanupFailed):
    code = 'cyb.cleanup.format_failed'
    message = 'Format NVM secure erase of %(device)s failed: %(reason)s'


class CleanupUnsupported(CleanupFailed):
    code = 'cyb.cleanup.unsupported'
    message = 'Device %(device)s has no usable cleanup action: %(reason)s'


class ControllerMissing(CleanupFailed):
    code = 'cyb.cleanup.controller_missing'
    message = ('NVMe controller of %(device)s (PCI %(address)s) is not bound to the host '
               'nvme driver: %(reason)s')


class PrecheckFailed(CleanupFailed):
    code = 'cyb.cleanup.precheck_failed'
    message = 'Device %(device)s is not safe to erase: %(reason)s'


class SanitizeFailed(CleanupFailed):
    code = 'cyb.cleanup.sanitize_failed'
    message = 'Sanitize of %(device)s failed: %(reason)s'


class ZeroingFailed(CleanupFailed):
    code = 'cyb.cleanup.zeroing_failed'
    message = 'Zeroing of %(device)s failed: %(reason)s'


class NamespaceLayoutFailed(CleanupFailed):
    code = 'cyb.cleanup.namespace_failed'
    message = 'Namespace consolidation of %(device)s failed: %(reason)s'


class VerifyFailed(CleanupFailed):
    code = 'cyb.cleanup.verify_failed'
    message = 'Read-back verification of %(device)s failed: %(reason)s'


class DeadlineExceeded(CleanupFailed):
    code = 'cyb.cleanup.deadline_exceeded'
    message = 'Cleanup of %(device)s did not finish within %(timeout)s s: %(reason)s'


class Interrupted(CleanupFailed):
    code = 'cyb.cleanup.interrupted'
    message = 'Cleanup of %(device)s was interrupted: %(reason)s'


class CleanupStuck(CleanupFailed):
    """Raised by the conductor's periodic task, not an agent: the cleanup made no
    progress for [nvme] cleanup_timeout + [conductor] cleanup_grace."""
    code = 'cyb.cleanup.stuck'
    message = 'cleanup stuck: no progress since %(since)s (last step %(step)s)'


# NVMe (steward/drivers/nvme/cli.py) -----------------------------------------------
class NvmeCliMissing(InvalidConfiguration):
    code = 'cyb.nvme.cli_missing'
    message = ('nvme-cli is not installed or not executable ([nvme] nvme_cli = '
               '%(binary)r): install the nvme-cli package on this host or set '
               '[nvme] nvme_cli to its path.')


class NvmeCliUnsupported(InvalidConfiguration):
    # steward/drivers/nvme/versions.py: a version whose output was never checked
    # could hide a drive's critical warning, as 2.11's did.
    code = 'cyb.nvme.cli_unsupported'
    message = ('nvme-cli %(version)s ([nvme] nvme_cli = %(binary)r) is not a version '
               'the nvme driver reads; supported: %(supported)s. Install one of them '
               'or set [nvme] nvme_cli to its path.')


class NvmeCommandFailed(StewardError):
    """``status`` on an instance is the NVMe status nvme-cli printed (None when it
    printed none), not an HTTP status: these never reach the API."""
    code = 'cyb.nvme.command_failed'
    message = 'nvme %(command)s failed: %(reason)s'

    def __init__(self, message=None, status=None, **kwargs):
        super().__init__(message, **kwargs)
        self.status = status


class NvmeInvalidOpcode(NvmeCommandFailed):
    code = 'cyb.nvme.invalid_opcode'


class NvmeSanitizeInProgress(NvmeCommandFailed):
    code = 'cyb.nvme.sanitize_in_progress'


class NvmeAccessDenied(NvmeCommandFailed):
    # SED-locked drives answer this (0x4286); an erase cannot work until unlocked.
    code = 'cyb.nvme.access_denied'


class NvmeCommandTimeout(NvmeCommandFailed):
    code = 'cyb.nvme.timeout'


class NvmeBadOutput(NvmeCommandFailed):
    code = 'cyb.nvme.bad_output'
    message = 'nvme %(command)s printed something unexpected: %(reason)s'


# Compute side (steward/compute, `steward compute`) --------------------------------
# ``status`` is the HTTP status a service wrapping the compute library would answer
# with; ``steward compute`` maps these errors to exit codes (steward/cmd/compute.py).
class ComputeError(StewardError):
    status = 500
    code = 'cyb.compute.error'
    message = 'Compute side: %(reason)s'


class FlavorInvalid(ComputeError):
    status = 400
    code = 'cyb.compute.flavor_invalid'
    message = 'Invalid flavor: %(reason)s'


class DeviceProfileUnusable(ComputeError):
    status = 400
    code = 'cyb.compute.device_profile_unusable'
    message = 'Device profile %(name)s cannot be used: %(reason)s'


class InstanceNameInvalid(ComputeError):
    status = 400
    code = 'cyb.compute.instance_name_invalid'
    message = ('Invalid instance name %(name)r: use 1-63 letters, digits, ".", "_" '
               'or "-", starting with a letter or digit.')


class InstanceExists(ComputeError):
    status = 409
    code = 'cyb.compute.instance_exists'
    message = 'An instance named %(name)s already exists on this host.'


class InstanceNotFound(ComputeError):
    status = 404
    code = 'cyb.compute.instance_not_found'
    message = 'No instance %(name)s on this host.'


class NoValidHost(ComputeError):
    status = 409
    code = 'cyb.compute.no_valid_host'
    message = 'No valid host: %(reason)s'


class ServiceCallFailed(ComputeError):
    status = 502
    code = 'cyb.compute.service_call_failed'
    message = '%(service)s call %(call)s failed: %(reason)s'


class BindFailed(ComputeError):
    status = 409
    code = 'cyb.compute.bind_failed'
    message = 'Binding the accelerator requests of instance %(instance)s failed: %(reason)s'


class BindTimeout(ComputeError):
    status = 504
    code = 'cyb.compute.bind_timeout'
    message = ('No accelerator-request-bound event for %(missing)s of instance '
               '%(instance)s within %(timeout)s s ([compute] arq_binding_timeout).')


class EventListenerFailed(ComputeError):
    status = 503
    code = 'cyb.compute.events_listen'
    message = 'Cannot serve os-server-external-events on %(listen)s: %(reason)s'


class AttachHandleInvalid(ComputeError):
    status = 422
    code = 'cyb.compute.attach_handle_invalid'
    message = 'Accelerator request %(arq)s has unusable attach_handle_info: %(reason)s'


class MdevFailed(ComputeError):
    status = 500
    code = 'cyb.compute.mdev_failed'
    message = 'Mediated device %(uuid)s (%(parent)s, type %(type)s): %(reason)s'


class InstanceBusy(ComputeError):
    status = 409
    code = 'cyb.compute.instance_busy'
    message = 'Instance %(name)s is still being booted by process %(pid)s.'


class CleanupIncomplete(ComputeError):
    status = 500
    code = 'cyb.compute.cleanup_incomplete'
    message = ('%(what)s of instance %(name)s left resources behind: %(failures)s. '
               'The instance is kept in state error; run `steward compute delete '
               '%(name)s` again once the cause is fixed.')


# The agent's privileged daemons (steward/privsep) ------------------------------------
class PrivsepRefused(StewardError):
    """A privileged entrypoint refused its arguments: a bug or a compromised agent,
    never a device's state."""
    code = 'cyb.privsep.refused'
    message = 'Privileged call %(call)s refused: %(reason)s'


# Switching from upstream Cyborg (steward db import-cyborg) -------------------------
class CyborgImportError(StewardError):
    code = 'cyb.cyborg_import.failed'
    message = 'Import from Cyborg failed: %(reason)s'


class CyborgSchemaUnknown(CyborgImportError):
    code = 'cyb.cyborg_import.schema_unknown'
    message = ('The Cyborg database is at alembic revision %(revision)s, which this '
               'import does not know (it reads %(known)s); upgrade Cyborg to a known '
               'release first.')


class CyborgImportRefused(CyborgImportError):
    code = 'cyb.cyborg_import.refused'
    message = 'Import from Cyborg refused: %(reason)s'


class CyborgImportConflict(CyborgImportError):
    code = 'cyb.cyborg_import.conflict'
    message = 'Import from Cyborg stopped by %(count)d conflict(s): %(conflicts)s'

"""Errors of the compute side, each with a stable code (``cyb.compute.*``).

The ``status`` is the HTTP status a service wrapping this library would answer
with; ``steward compute`` maps errors to exit codes (steward/cmd/compute.py).
"""
from steward.common import exception


class ComputeError(exception.StewardError):
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

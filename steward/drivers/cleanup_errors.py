"""Why a device cleanup failed: one class per fault, each with a stable code.

The code lands in the device's erase record (``error_code``) where operators and
scripts match on it; the message says what to look at. Raised by drivers' cleanup
and by the agent's cleanup executor, never answered by the API.
"""
from steward.common import exception


class CleanupFailed(exception.StewardError):
    code = 'cyb.cleanup.failed'
    message = 'Cleanup of device %(device)s failed: %(reason)s'


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

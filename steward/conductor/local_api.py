"""The conductor of this process, called directly: ``LocalConductorAPI``.

A process that holds the ConductorManager itself (``steward serve``, tests)
hands its callers (the API, the agent) this instead of steward/conductor/rpcapi.py's
``ConductorAPI``: the same methods (``rpcapi.ConductorCalls``), each a direct
call of the manager's method of the same name: no serialisation, no broker. An
error the manager raises reaches the caller as it is (manager.expected).
"""
from steward.conductor import rpcapi


class LocalConductorAPI(rpcapi.ConductorCalls):
    """``manager``: the steward.conductor.manager.ConductorManager of this
    process (or a test's stand-in with the methods it calls)."""

    def __init__(self, manager):
        self.manager = manager

    def can_send_version(self, version):
        """Always: the conductor of this process is this release."""
        return True

    def _call(self, ctx, method, timeout=None, version=None, **kwargs):
        return getattr(self.manager, method)(ctx, **kwargs)

    def can_cast_quiet(self):
        """Never: a call to this process costs no more than a cast."""
        return False

    def report_quiet(self, ctx, host, rp_name, digest, read_at=None):
        self.manager.report_quiet(ctx, host=host, rp_name=rp_name, digest=digest,
                                  read_at=read_at)

    def device_release_for_cleaning(self, ctx, device_uuid):
        """The manager asks the device's agent itself (it never raises)."""
        return self.manager.device_release_for_cleaning(ctx, device_uuid)

"""The ARQ operations as a caller asks for them: create, bind (with Nova's event),
unbind, delete, over steward/arqs/ops.py.

One object, two places it runs; the composition root (steward/cmd/root.py)
decides which, and the API reaches it through steward/arqs/api.py:

* in a conductor (``ConductorManager``), for the API processes that send the
  operations over RPC (``ArqRPCAPI``: ``[upgrade_levels] conductor`` below 1.2,
  or an API host whose ``[placement]`` names no service) and for ``steward
  serve`` (whose API calls it through a ``LocalArqAPI``); there
  ``dispatch_cleanup`` asks the device's agent (steward/conductor/cleanup_ops.py);
* in each API process itself (``LocalArqAPI``, steward/cmd/api_factory.py), which
  is what a deployment runs: a boot then never crosses the broker. Every decision
  of these operations is a conditional UPDATE or a row lock in the database (the
  bind guard, steward/arqs/device_ops.py), so any number of API processes and
  conductors may run them side by side. What needs an agent (a released NVMe
  device's cleanup) is handed to a conductor: ``dispatch_cleanup``
  (ConductorAPI.device_release_for_cleaning).
"""
import functools

from steward.arqs import ops as arq_ops
from steward.common import exception
from steward.common import states


def _acting(fn):
    """Device transitions of the operation are recorded as made by this
    service's ``actor`` (None: the conductor, states.default_actor)."""
    @functools.wraps(fn)
    def inner(self, *args, **kwargs):
        with states.acting_as(self.actor):
            return fn(self, *args, **kwargs)
    return inner


class ARQService:
    """``deps``: a steward.conductor.deps.Deps (its database, metrics, Placement
    client and Nova notifier are used; an API process's has no agent API).
    ``dispatch_cleanup(ctx, device_uuid)``: who asks a released device's agent to
    clean it, once the release is committed (it never raises): a conductor's
    cleanup_ops.dispatch_cleanup, an API process's cast to a conductor. ``actor``:
    who the transitions are recorded as made by (None: this conductor)."""

    def __init__(self, deps, dispatch_cleanup, actor=None):
        self.deps = deps
        self._dispatch = dispatch_cleanup
        self.actor = actor
        self._profiles = arq_ops.KnownProfiles()

    @_acting
    def arq_create(self, ctx, device_profile_name, project_id):
        return arq_ops.create(self.deps, ctx, device_profile_name, project_id,
                              known=self._profiles)

    @_acting
    def arq_bind(self, ctx, bindings):
        """The bound records; Nova gets one event per bind, completed or failed,
        once its outcome is committed."""
        try:
            records = arq_ops.bind(self.deps, ctx, bindings, dispatch=self._dispatch)
        except exception.StewardError as err:
            failed = getattr(err, 'failed_arqs', None)
            if failed:
                self.deps.notifier.notify([(inst, arq, 'failed') for arq, inst in failed])
            raise
        self.deps.notifier.notify([(r['instance_uuid'], r['uuid'], 'completed')
                                   for r in records])
        return records

    @_acting
    def arq_unbind(self, ctx, arq_uuids):
        return arq_ops.unbind(self.deps, ctx, arq_uuids, dispatch=self._dispatch)

    @_acting
    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        return arq_ops.delete(self.deps, ctx, arq_uuids=arq_uuids,
                              instance_uuid=instance_uuid, project_id=project_id,
                              dispatch=self._dispatch)

"""The conductor: the RPC endpoint behind ConductorAPI, over the operations
(cleanup_ops, cleanup_recovery, status_ops), the reporter and the periodic
worker, and the ARQ operations (steward/arqs: an ARQService of its own, for the
API processes that send them over RPC and for steward serve's API). What they
all work with (database, Placement, Nova, agent API, metrics) is one
``deps.Deps`` the composition root builds and hands in; each operation gets it as
its first parameter, and nothing here builds one."""
import functools
import logging

import oslo_messaging as messaging

from steward.arqs import service as arq_service
from steward.common import context
from steward.common import exception
from steward.common import report_digest
from steward.common import rpc
from steward.common import states
from steward.conductor import cleanup_ops
from steward.conductor import cleanup_recovery
from steward.conductor import periodic
from steward.conductor import report
from steward.conductor import rpcapi
from steward.conductor import status_ops
from steward.db import data_migrations
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.conf import CONF

LOG = logging.getLogger(__name__)

# Refusals callers provoke in the normal course of things: a bind race lost
# (NoFreeAttachHandle), an unknown uuid, a transition the state does not allow,
# bad input. The caller gets the error; the conductor logs one INFO line instead of
# oslo.messaging's "Exception during message handling" ERROR and traceback.
ROUTINE = (exception.Invalid, exception.NotFound, exception.Conflict,
           exception.Forbidden)


def expected(*classes):
    """oslo.messaging's ``expected_exceptions`` for an endpoint also called
    directly: over RPC a listed error travels as ExpectedException (which the
    server does not log), called directly it is raised as is."""
    def outer(fn):
        @functools.wraps(fn)
        def inner(self, ctx, *args, **kwargs):
            try:
                return fn(self, ctx, *args, **kwargs)
            except classes as err:
                if not rpc.dispatched(ctx):
                    raise
                LOG.info('%s refused with %s (%s): %s request_id=%s', fn.__name__,
                         err.status, err.code, err.msg, getattr(ctx, 'request_id', None))
                raise messaging.ExpectedException()
        return inner
    return outer


class ConductorManager:
    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, deps):
        """``deps``: the steward.conductor.deps.Deps of this conductor."""
        self.deps = deps
        # The ARQ operations this conductor runs; a device they release is handed
        # to its agent from here (only a conductor talks to agents).
        self.arqs = arq_service.ARQService(
            deps, dispatch_cleanup=functools.partial(cleanup_ops.dispatch_cleanup, deps))
        self.reporter = report.Reporter(deps, CONF.placement.create_compute_node)
        self.periodic = periodic.PeriodicTasks(deps, self.reporter)

    @property
    def database(self):
        return self.deps.database

    @property
    def metrics(self):
        return self.deps.metrics

    @property
    def notifier(self):
        return self.deps.notifier

    @property
    def placement(self):
        return self.deps.placement_client

    @property
    def agent_api(self):
        return self.deps.agent_api

    def placement_stats(self):
        """What metrics report about this conductor's Placement client (None:
        it has none)."""
        client = self.deps.placement_client
        return None if client is None else dict(client.stats)

    def init_host(self):
        """Backfill device_state, finish deletes a crash interrupted (all of them:
        this conductor has none in progress yet) and report to metrics."""
        done = data_migrations.run_all(self.database)
        if any(done.values()):
            LOG.info('Online data migrations at start: %s', done)
        periodic.finish_stale_deletes(self.deps, context.get_admin_context(),
                                      grace=0)
        self.metrics.register_placement_stats(self.placement_stats)

    def start(self):
        """Start the periodic tasks (steward/conductor/periodic.py)."""
        self.periodic.start()

    def reloaded(self, changed):
        """The configuration was reloaded (SIGHUP); ``changed``: the options that
        took a new value."""
        self.periodic.reloaded(changed)

    def stop(self):
        self.periodic.stop()
        self.notifier.stop()
        self.metrics.unregister_placement_stats(self.placement_stats)

    # -- agents --------------------------------------------------------------------
    def _answered(self, result):
        # An acknowledged report: say whether this conductor can ask the agent
        # for a whole report (agent RPC 1.2), so that its quiet ones may be casts.
        if result.get('digest') and self.agent_api is not None and \
                self.agent_api.can_send_version(report_digest.AGENT_RPC_VERSION):
            result['quiet_cast'] = True
        return result

    @expected(*ROUTINE)
    def report_data(self, ctx, host, rp_name, devices):
        return self._answered(self.reporter.report(ctx, host, rp_name, devices))

    @expected(*ROUTINE)
    def report_unchanged(self, ctx, host, rp_name, digest, read_at=None):
        """1.3: an agent's report the same as the one a conductor last answered."""
        return self._answered(self.reporter.unchanged(ctx, host, rp_name, digest, read_at))

    @expected(*ROUTINE)
    def report_quiet(self, ctx, host, rp_name, digest, read_at=None):
        """1.4 (cast): report_unchanged, unanswered; a digest this conductor
        cannot take gets the agent asked for the whole report."""
        result = self.reporter.unchanged(ctx, host, rp_name, digest, read_at)
        if result.get('resend'):
            LOG.info('Report of host %s: digest %s not the stored one; asking its '
                     'agent for the whole report', host, (digest or '')[:12])
            self.agent_api.report_again(ctx, host)

    # -- API -----------------------------------------------------------------------
    @expected(*ROUTINE)
    def arq_create(self, ctx, device_profile_name, project_id):
        return self.arqs.arq_create(ctx, device_profile_name, project_id)

    @expected(*ROUTINE)
    def arq_bind(self, ctx, bindings):
        return self.arqs.arq_bind(ctx, bindings)

    @expected(*ROUTINE)
    def arq_unbind(self, ctx, arq_uuids):
        return self.arqs.arq_unbind(ctx, arq_uuids)

    @expected(*ROUTINE)
    def arq_delete(self, ctx, arq_uuids=None, instance_uuid=None, project_id=None):
        return self.arqs.arq_delete(ctx, arq_uuids=arq_uuids, instance_uuid=instance_uuid,
                                    project_id=project_id)

    @expected(*ROUTINE)
    def device_set_status(self, ctx, device_uuid, status):
        if status not in states.DEVICE_STATUSES:
            raise exception.InvalidParameter(name='status', value=status,
                                             reason='expected enabled or maintaining')
        return status_ops.set_status(self.deps, ctx, device_uuid, status)

    @expected(*ROUTINE)
    def deployable_program(self, ctx, deployable_uuid, image_uuid):
        with self.database.reader() as s:
            dep = deployable_db.deployable_get(s, deployable_uuid)
        # No enabled driver can program an FPGA image: say so instead of pretending.
        raise exception.NotProgrammable(
            uuid=dep.uuid, reason=f'driver {dep.driver_name or "unknown"} does not '
                                  f'support programming')

    # -- device cleanup (1.1) --------------------------------------------------------
    @expected(*ROUTINE)
    def device_clean(self, ctx, device_uuid):
        return cleanup_ops.operator_clean(self.deps, ctx, device_uuid)

    @expected(*ROUTINE)
    def device_clean_plan(self, ctx, device_uuid):
        return cleanup_ops.plan(self.deps, ctx, device_uuid)

    @expected(*ROUTINE)
    def device_cleanup_start(self, ctx, device_uuid, host, trigger):
        return cleanup_ops.start(self.deps, ctx, device_uuid, host, trigger)

    @expected(*ROUTINE)
    def device_cleanup_progress(self, ctx, record_uuid, phase, percent, detail):
        return cleanup_ops.progress(self.deps, ctx, record_uuid, phase, percent, detail)

    @expected(*ROUTINE)
    def device_cleanup_finish(self, ctx, device_uuid, record_uuid, succeeded, record,
                              error_code=None, error_message=None):
        result = cleanup_ops.finish(self.deps, ctx, device_uuid, record_uuid,
                                    succeeded, record, error_code, error_message)
        if not result['placement_ok']:
            # Make the host's next report re-sync Placement even if unchanged.
            with self.database.reader() as s:
                self.reporter.forget(device_db.device_get(s, device_uuid).hostname)
        return result

    @expected(*ROUTINE)
    def device_recovery_info(self, ctx, host, agent_version):
        """An agent is starting: remember its RPC version, run the online data
        migrations (spec 1 lists agent start among their entry points) and tell it
        what to reconcile."""
        self.deps.agent_api.record_host_version(host, agent_version)
        done = data_migrations.run_all(self.database)
        if any(done.values()):
            LOG.info('Online data migrations at agent %s start: %s', host, done)
        return cleanup_recovery.recovery_info(self.deps, ctx, host)

    @expected(*ROUTINE)
    def device_fail_interrupted(self, ctx, device_uuid, reason):
        return cleanup_recovery.fail_interrupted(self.deps, ctx, device_uuid, reason)

    @expected(*ROUTINE)
    def device_recover_missed_cleanup(self, ctx, device_uuid):
        return cleanup_recovery.recover_missed(self.deps, ctx, device_uuid)

    # -- 1.2: ARQ operations in the API process ---------------------------------------
    def device_release_for_cleaning(self, ctx, device_uuid):
        """An API process released the last ARQ of a device that needs cleaning
        (cast): ask its agent, as after a release done here. Never raises: a lost
        or failed dispatch is found again by the periodic clean_missed_releases."""
        cleanup_ops.dispatch_cleanup(self.deps, ctx, device_uuid)

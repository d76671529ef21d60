"""The conductor's periodic tasks: nothing stays stuck (Ironic's periodic sweeps).

Every ``[conductor] periodic_interval`` seconds (re-read at each wait, so a
reload changes it), in one thread per conductor (``steward conductor`` and
``steward serve`` alike):

* stuck cleanups: pending_cleaning or cleaning with no progress for ``[nvme]
  cleanup_timeout`` + ``[conductor] cleanup_grace`` -> error (cyb.cleanup.stuck);
* lost cleanup requests: pending_cleaning whose cleanup has not started for
  ``[conductor] cleanup_resend_interval`` -> cleanup_device is sent again;
* missed releases: a device that needs cleaning, allocated with no accelerator
  request for that long -> its agent is pinged and asked to clean it;
* accelerator requests left in Deleting for ``[conductor] stale_delete_grace``
  -> their delete is finished;
* accelerator requests Initial with no instance for ``[conductor]
  initial_arq_max_age`` -> deleted, and each device provider's inventory and
  reserved in Placement compared with the devices and repaired
  (steward/conductor/selfheal.py);
* orphaned accelerator requests (only with ``[nova]`` configured): Bound to an
  instance Nova has answered 404 for (``GET /servers/{uuid}``) for longer than
  ``[conductor] orphan_grace`` -> deleted as Nova's ``DELETE ?instance=`` would
  (Nova deletes the server even when that DELETE failed); Bound on devices of
  another host than the one Nova says the instance is on, while it is not moving
  (status not RESIZE, VERIFY_RESIZE, REVERT_RESIZE or MIGRATING, no task_state),
  for that long -> that set alone is deleted (a finished move's delete of the
  source's set, or a revert's of the destination's, was lost).

Several conductors may run them at once: every state change is a compare-and-swap
through ``transitions.advance`` and the agent's start of a cleanup is one too, so the
loser of a race changes nothing. An expected condition (a device that moved on
meanwhile, an unreachable agent or database) is one log line, never a traceback.
"""
import datetime
import functools
import logging

from oslo_db import exception as db_exc
import oslo_messaging as messaging
from oslo_utils import timeutils
import sqlalchemy as sa

from steward.arqs import device_ops
from steward.arqs import nova_events
from steward.arqs import ops as arq_ops
from steward.common import context
from steward.common import exception
from steward.common import states
from steward.common import ticker
from steward.conductor import cleanup_ops
from steward.conductor import cleanup_recovery
from steward.conductor import nova_servers
from steward.conductor import selfheal
from steward.conf import CONF
from steward.db import arqs as arq_db
from steward.db import device_history as history_db
from steward.db import devices as device_db
from steward.db import query as db_query

LOG = logging.getLogger(__name__)
EXPECTED = (exception.StewardError, messaging.MessagingException, sa.exc.DBAPIError,
            db_exc.DBError)
# Instances asked to Nova per run of the orphan check.
ORPHAN_BATCH = 100


def _age(now, then):
    return (now - then).total_seconds()


def fail_stuck_cleanups(deps, ctx, now=None):
    """Returns the uuids of the devices moved to error."""
    now = now or timeutils.utcnow()
    limit = CONF.nvme.cleanup_timeout + CONF.conductor.cleanup_grace
    with deps.database.reader() as s:
        stuck = [d.uuid for d in device_db.devices_in_states_anywhere(
            s, (states.DEV_PENDING_CLEANING, states.DEV_CLEANING))
            if _age(now, cleanup_recovery.last_progress(s, d)[0]) > limit]
    return [u for u in stuck
            if _one(cleanup_recovery.fail_stuck, deps, ctx, u, limit, now)]


def finish_stale_deletes(deps, ctx, grace=None, now=None):
    """Rows left in Deleting: releases before this one committed Deleting, then
    removed the row in a second transaction, and a crash in between left the row
    (a delete is one transaction now). Only rows older than ``grace`` are
    finished, so this never races a delete that is still in progress. Returns
    their number."""
    grace = CONF.conductor.stale_delete_grace if grace is None else grace
    cutoff = (now or timeutils.utcnow()) - datetime.timedelta(seconds=grace)
    with deps.database.reader() as s:
        stale = [a.uuid for a in arq_db.arq_list(s, states_in=[states.ARQ_DELETING])
                 if a.updated_at is None or a.updated_at <= cutoff]
    if stale:
        LOG.info('Finishing %d ARQ delete(s) left in Deleting for over %ss',
                 len(stale), grace)
        arq_ops.finish_deleting(deps, ctx, stale, dispatch=_dispatch(deps))
    return len(stale)


def _dispatch(deps):
    """Who asks the agent of a device the ARQ operations of these tasks release
    to clean it: this conductor (steward/arqs/ops.py ``dispatch``)."""
    return functools.partial(cleanup_ops.dispatch_cleanup, deps)


def _one(task, deps, ctx, device_uuid, *args):
    """Run ``task`` for one device; a device another conductor (or the agent) moved
    meanwhile, or an outage, is logged and skipped."""
    try:
        return task(deps, ctx, device_uuid, *args)
    except EXPECTED as err:
        LOG.warning('device %s: %s skipped: %s', device_uuid, task.__name__, err)
        return False


class PeriodicTasks:
    """The tasks that remember something between runs (when a device was last
    asked, or first seen released) and the worker that runs them all."""

    def __init__(self, deps, reporter):
        self.deps = deps
        self.reporter = reporter    # the conductor's report.Reporter (drift repair)
        self._resent = {}       # device uuid -> when cleanup_device was last re-sent
        self._released = {}     # device uuid -> when first seen allocated without ARQ
        # The orphan check's memory, in this conductor's memory only (a restart, or
        # another conductor, starts the grace over: later, never earlier):
        self._gone = {}         # instance uuid -> when Nova first answered 404
        self._asked = {}        # instance uuid -> when Nova was last asked
        # instance uuid -> {ARQ uuid: when first seen Bound on another host than
        # the one Nova said the instance is on, while not moving}
        self._left = {}
        self._unknown_hosts = set()     # (instance, host) said once
        self._thread = None     # the Ticker running every task in turn

    # -- tasks ---------------------------------------------------------------------
    def fail_stuck_cleanups(self, ctx, now=None):
        """Returns the uuids of the devices moved to error."""
        return fail_stuck_cleanups(self.deps, ctx, now)

    def finish_stale_deletes(self, ctx, grace=None, now=None):
        return finish_stale_deletes(self.deps, ctx, grace, now)

    def resend_lost_cleanups(self, ctx, now=None):
        """Returns the uuids cleanup_device was sent again for."""
        now = now or timeutils.utcnow()
        interval = CONF.conductor.cleanup_resend_interval
        todo = []
        with self.deps.database.reader() as s:
            pending = device_db.devices_in_states_anywhere(s, (states.DEV_PENDING_CLEANING,))
            for device in pending:
                if device.missing_since is not None or \
                        cleanup_recovery.cleanup_started(s, device):
                    continue
                entered = history_db.device_entered(s, device.uuid, states.DEV_PENDING_CLEANING)
                since = entered.created_at if entered else device.updated_at
                last = self._resent.get(device.uuid, since)
                if _age(now, since) >= interval and _age(now, last) >= interval:
                    todo.append((device.uuid, device.hostname, since,
                                 cleanup_recovery.TRIGGER_OF_EVENT.get(
                                     getattr(entered, 'event', None), 'recovery')))
        self._resent = {u: t for u, t in self._resent.items()
                        if u in {d.uuid for d in pending}}
        sent = []
        for device_uuid, host, since, trigger in todo:
            LOG.warning('device %s: pending_cleaning since %s and its cleanup never '
                        'started; sending cleanup_device to the agent of %s again',
                        device_uuid, db_query.timestamp(since), host)
            self._resent[device_uuid] = now
            if _one(cleanup_ops.dispatch, self.deps, ctx, device_uuid, trigger):
                sent.append(device_uuid)
        return sent

    def clean_missed_releases(self, ctx, now=None):
        """Returns the uuids whose cleanup was asked for."""
        now = now or timeutils.utcnow()
        interval = CONF.conductor.cleanup_resend_interval
        todo, released = [], {}
        with self.deps.database.reader() as s:
            for device in device_db.devices_in_states_anywhere(s, (states.DEV_ALLOCATED,)):
                if not device_ops.supports_cleaning(device) or \
                        device.missing_since is not None or \
                        device_db.device_has_active_arq(s, device.id) or \
                        device_db.device_handles_in_use(s, device.id):
                    continue
                released[device.uuid] = first = self._released.get(device.uuid, now)
                if _age(now, first) >= interval:
                    todo.append((device.uuid, device.hostname, first))
        self._released = released
        asked = []
        for device_uuid, host, first in todo:
            LOG.warning('device %s: allocated with no accelerator request since %s; '
                        'asking the agent of %s to clean it', device_uuid,
                        db_query.timestamp(first), host)
            # Not answered: asked again one interval later.
            self._released[device_uuid] = now
            if _one(cleanup_ops.release_for_cleaning, self.deps, ctx, device_uuid,
                    True):
                asked.append(device_uuid)
        return asked

    def release_orphan_arqs(self, ctx, now=None):
        """Without [nova]: nothing. Otherwise asks Nova about up to ORPHAN_BATCH
        instances holding Bound ARQs (never asked, then least recently asked; the
        oldest updated first) and deletes, once ``[conductor] orphan_grace`` has
        passed since it was first seen so:

        * the ARQs of an instance Nova answers 404 for;
        * the ARQs an instance holds on devices of another host than the one Nova
          says it is on, while it is not moving: the set a finished move (resize
          confirmed or reverted, cold or live migration) left behind.

        Returns the instances some of whose ARQs were deleted."""
        if not nova_events.configured():
            return []
        now = now or timeutils.utcnow()
        grace = CONF.conductor.orphan_grace
        with self.deps.database.reader() as s:
            bound = arq_db.arq_bound_instances(s)
        held = {inst for inst, _ in bound}
        self._gone = {i: t for i, t in self._gone.items() if i in held}
        self._asked = {i: t for i, t in self._asked.items() if i in held}
        self._left = {i: t for i, t in self._left.items() if i in held}
        self._unknown_hosts = {k for k in self._unknown_hosts if k[0] in held}
        never = datetime.datetime.min
        batch = sorted(bound, key=lambda b: (self._asked.get(b[0], never), b[1]))
        unknown, reason, todo, moved = 0, None, [], []
        for inst, _ in batch[:ORPHAN_BATCH]:
            self._asked[inst] = now
            try:
                server = self.deps.nova.server(inst)
            except nova_servers.ServerStatusUnknown as err:
                unknown, reason = unknown + 1, str(err)
                if err.unreachable:
                    break           # not another request this run
                continue
            if server is not None:
                self._gone.pop(inst, None)
                left = self._left_behind(inst, server, now, grace)
                if left is not None:
                    moved.append(left)
                continue
            self._left.pop(inst, None)
            first = self._gone.setdefault(inst, now)
            if _age(now, first) > grace:
                todo.append((inst, first))
        if unknown:
            LOG.warning('Orphan check: Nova did not say whether %d instance(s) exist '
                        '(%s); their accelerator requests are kept', unknown, reason)
        released = []
        for inst, first in todo:
            with self.deps.database.reader() as s:
                arqs = [a.uuid for a in arq_db.arq_list(s, instance_uuid=inst)]
            if not arqs:
                continue
            try:
                arq_ops.delete(self.deps, ctx, instance_uuid=inst,
                               dispatch=_dispatch(self.deps))
            except EXPECTED as err:
                LOG.warning('instance %s: its orphaned accelerator requests %s could '
                            'not be deleted: %s', inst, ', '.join(arqs), err)
                continue
            self._gone.pop(inst, None)
            LOG.warning('instance %s: Nova has answered 404 for it since %s; deleted '
                        'its accelerator request(s) %s (Nova\'s delete of them was '
                        'lost), releasing their devices', inst, db_query.timestamp(first),
                        ', '.join(arqs))
            self.deps.metrics.orphan_arqs_released(len(arqs))
            released.append(inst)
        released += [inst for inst, host, arqs, hosts, first in moved
                     if self._release_left_behind(ctx, inst, host, arqs, hosts, first)]
        return released

    def _left_behind(self, inst, server, now, grace):
        """The Bound ARQs ``inst`` holds on devices of another host than Nova's
        ``server.host`` while it is not moving, due for deletion: (instance, host,
        [ARQ uuids], their hosts, since when) or None. Remembers since when each
        was seen so; a move (or an ARQ back on the server's host) forgets it."""
        if server.moving or not server.host:
            # Both sets may be needed until the move is confirmed or reverted.
            self._left.pop(inst, None)
            return None
        with self.deps.database.reader() as s:
            stray = {arq: host for arq, host in arq_db.arq_bound_hosts(s, inst)
                     if host != server.host}
            known = bool(stray) and device_db.device_host_known(s, server.host)
        if not stray:
            self._left.pop(inst, None)
            return None
        if not known:
            # Nova names a host no agent reports devices on: Nova's and the
            # agents' host names may differ ([DEFAULT] host), and deleting every
            # instance's ARQs for that would be a disaster. Said once.
            if (inst, server.host) not in self._unknown_hosts:
                self._unknown_hosts.add((inst, server.host))
                LOG.warning('instance %s: Nova says it is on host %s, where no agent '
                            'reports a device; its accelerator requests %s on %s are '
                            'kept (do the agents\' [DEFAULT] host names match Nova\'s '
                            'compute host names?)', inst, server.host,
                            ', '.join(sorted(stray)), ', '.join(sorted(set(stray.values()))))
            self._left.pop(inst, None)
            return None
        seen = self._left.get(inst, {})
        seen = self._left[inst] = {arq: seen.get(arq, now) for arq in stray}
        due = [arq for arq, first in seen.items() if _age(now, first) > grace]
        if not due:
            return None
        return (inst, server.host, due, sorted({stray[a] for a in due}),
                min(seen[a] for a in due))

    def _release_left_behind(self, ctx, inst, host, arqs, hosts, first):
        try:
            arq_ops.delete(self.deps, ctx, arq_uuids=arqs, dispatch=_dispatch(self.deps))
        except EXPECTED as err:
            LOG.warning('instance %s: its accelerator requests %s left on %s by a '
                        'finished move could not be deleted: %s', inst,
                        ', '.join(arqs), ', '.join(hosts), err)
            return False
        self._left.pop(inst, None)
        LOG.warning('instance %s: Nova has said since %s that it is on %s and not '
                    'moving; deleted its accelerator request(s) %s on %s (left behind '
                    'by a finished move: Nova\'s delete of them was lost), releasing '
                    'their devices', inst, db_query.timestamp(first), host, ', '.join(arqs),
                    ', '.join(hosts))
        self.deps.metrics.orphan_arqs_released(len(arqs))
        return True

    # Self-healing (steward/conductor/selfheal.py).
    def remove_stale_initial_arqs(self, ctx, now=None):
        """Returns the uuids of the Initial ARQs deleted."""
        return selfheal.remove_stale_initial_arqs(self.deps, ctx, now)

    def repair_placement_drift(self, ctx, now=None):
        """Returns [(provider uuid, what)] repaired."""
        return selfheal.repair_placement_drift(self.deps, ctx, self.reporter, now)

    def run_once(self, now=None):
        """Every task once, in order (the worker's runs, and tests)."""
        ctx = context.get_admin_context()
        ctx.update_store()          # this run's request id on its log lines
        for task in self._tasks():
            self._guarded(task, ctx, now)

    def _tasks(self):
        return (self.fail_stuck_cleanups, self.resend_lost_cleanups,
                self.clean_missed_releases, self.finish_stale_deletes,
                self.release_orphan_arqs, self.remove_stale_initial_arqs,
                self.repair_placement_drift)

    @staticmethod
    def _guarded(task, ctx, now=None):
        try:
            kwargs = {'now': now} if now is not None else {}
            return task(ctx, **kwargs)
        except EXPECTED as err:
            LOG.warning('Periodic task %s could not run: %s; next run in %ss',
                        task.__name__, err, CONF.conductor.periodic_interval)
            return None

    # -- the worker ----------------------------------------------------------------
    def start(self):
        if self._thread is not None:
            return
        # [conductor] periodic_interval is read before every wait: a reload that
        # changes it takes effect at once (steward/common/ticker.py).
        self._thread = ticker.Ticker('steward-conductor-periodic', self.run_once,
                                     lambda: CONF.conductor.periodic_interval)
        self._thread.start()
        LOG.info('Conductor periodic tasks every %ss: %s',
                 CONF.conductor.periodic_interval,
                 ', '.join(t.__name__ for t in self._tasks()))

    def reloaded(self, changed):
        """After a reload of the configuration (SIGHUP): a new interval counts from
        now. The graces and timeouts are read at each run."""
        if self._thread is not None and ('conductor', 'periodic_interval') in changed:
            self._thread.wake()

    def stop(self):
        if self._thread is None:
            return
        self._thread.stop(30)
        self._thread = None

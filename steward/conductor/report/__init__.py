"""Persist what an agent discovered and mirror it in Placement, as a diff.

The ``Reporter`` takes each report of an agent (``report_data``) through two
steps:

* steward/conductor/report/diff.py: the report turned into database changes
  (devices, deployables, attributes, attach handles);
* steward/conductor/report/placement_sync.py: the result mirrored to Placement,
  and, before the diff, the devices Nova already hands out left out.

Once a report's rows and providers are in place its digest
(steward/common/report_digest.py) is stored in the database (``host_reports``),
and the answer carries it. A report with the digest stored for its host costs
one lookup, shared with the other reports arriving meanwhile
(report/digests.py): no write, no Placement request, whichever conductor takes
it. An agent of this release that knows its report has not changed sends only
the digest (``unchanged``, RPC 1.3) and is asked for the whole report when the
database holds another. The first report of a host Steward has no row of goes
with the others arriving at the same moment, in one batch
(steward/conductor/report/first.py).
"""
import threading

from steward.common import report_digest
from steward.conductor import health_ops
from steward.conductor.report import diff
from steward.conductor.report import digests
from steward.conductor.report import first
from steward.conductor.report import placement_sync
from steward.db import host_reports
from steward.drivers import objects


class Reporter:
    def __init__(self, deps, create_compute_node=True):
        self.database = deps.database
        self.placement_sync = placement_sync.PlacementSync(deps, create_compute_node)
        self.stored = digests.StoredDigests(deps.database)
        self.first = first.FirstRegistrations(deps.database, self.placement_sync,
                                              self.stored)
        # Hosts this conductor has written rows of: their reports skip the first
        # registration's batch (and its query) for good.
        self._known = set()
        self._lock = threading.Lock()

    def _quiet(self, host, entry, newest_read_at):
        digest, written = entry
        # A health reading's time changes every cycle: it is no change (issue 38;
        # health_ops.refresh_read_at keeps "last read" current on quiet cycles).
        refreshed = health_ops.refresh_read_at(self.database, host, newest_read_at,
                                               written)
        if refreshed is not None:
            self.stored.remember({host: (digest, refreshed)})
        with self._lock:
            self._known.add(host)
        return {'changed': False, 'placement_writes': 0, 'digest': digest}

    def unchanged(self, ctx, host, rp_name, digest, read_at=None):
        """RPC 1.3: the agent's report has ``digest``, the one a conductor last
        answered it with. Quiet when the database holds it for the host (as this
        conductor's memory of the table has it: digests.StoredDigests); else
        ``{'resend': True}``: the agent sends the whole report."""
        if not digest:
            return {'resend': True}
        entry = self.stored.cached(host)
        if entry is None or entry[0] != digest:
            entry = self.stored.get(host)
            if entry is None or entry[0] != digest:
                return {'resend': True}
        return self._quiet(host, entry, read_at)

    def report(self, ctx, host, rp_name, devices):
        # A whole report (an agent of an earlier release, or a report that
        # changed) is judged by the database itself, not this conductor's memory:
        # another conductor may have taken a change of the host since. A host the
        # memory has no digest of is taken as having none (a fleet's first
        # reports: no lookup each): if another conductor stored one since the
        # memory was read, the report only goes through the diff, which judges it
        # with the host's rows.
        digest = report_digest.digest(rp_name, devices)
        newest = report_digest.newest_read_at(devices)
        stored = self.stored.get(host) if self.stored.cached(host) is not None else None
        if stored is not None and stored[0] == digest:
            return self._quiet(host, stored, newest)
        entry = (digest, health_ops.reading_time(newest))
        parsed = [objects.DriverDevice.from_dict(d) for d in devices]
        if host not in self._known and stored is None:
            result = self.first.register(host, rp_name, parsed, entry)
            if result is not None:
                with self._lock:
                    self._known.add(host)
                if 'error' not in result and 'digest' not in result:
                    # Nothing of it to write (every device Nova's, said once):
                    # the same report again is quiet.
                    if digests.store(self.database, {host: entry}):
                        self.stored.remember({host: entry})
                        result['digest'] = digest
                return result
        # Per-report state: reports of several hosts run in parallel.
        state = placement_sync.SyncState()
        parsed = self.placement_sync.without_nova_owned(state, host, rp_name, parsed)
        changes = diff.ReportDiff(self.database)
        removed_rps = changes.persist(ctx, host, parsed)
        writes = self.placement_sync.sync(state, host, rp_name, removed_rps,
                                          changes.inserted_rps)
        if writes is not None and changes.reshapes:
            # Devices in use joining a pool, with their instances' allocations
            # (issue 52); retried by the next report when refused.
            self.placement_sync.move_in_use(state, rp_name, changes.reshapes)
        with self._lock:
            self._known.add(host)
        # A change held back for an in-use handle or device must be retried on the
        # next cycle even though the report itself will not change: no digest.
        applied = writes is not None and not changes.deferred
        if applied or stored is not None:
            done = {host: entry if applied else (None, None)}
            if digests.store(self.database, done):
                self.stored.remember(done)
        result = {'changed': True, 'placement_writes': writes or 0}
        if applied:
            result['digest'] = digest
        if state.error is not None:
            # The agent logs it too: its operator reads the agent's log first.
            err = state.error
            result['error'] = {'code': err.code, 'message': str(err)}
        return result

    def registering(self):
        """The providers first registrations are writing to Placement now."""
        return self.first.registering()

    def forget(self, host=None):
        """Make the next report of ``host`` (of every host with None) go through
        the diff even if it is the same as the last one, whichever conductor
        takes it."""
        with self.database.writer() as s:
            host_reports.clear(s, host)
        self.stored.forget(host)

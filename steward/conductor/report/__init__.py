"""Persist what an agent discovered and mirror it in Placement, as a diff.

The ``Reporter`` takes each report of an agent (``report_data``) through two
steps:

* steward/conductor/report/diff.py: the report turned into database changes
  (devices, deployables, attributes, attach handles);
* steward/conductor/report/placement_sync.py: the result mirrored to Placement,
  and, before the diff, the devices Nova already hands out left out.

An agent whose report is byte-for-byte what it sent last time costs one digest
comparison: no database query and no Placement request.
"""
import hashlib
import json
import threading

from steward.conductor import health_ops
from steward.conductor.report import diff
from steward.conductor.report import placement_sync
from steward.drivers import objects


class Reporter:
    def __init__(self, deps, create_compute_node=True):
        self.database = deps.database
        self.placement_sync = placement_sync.PlacementSync(deps, create_compute_node)
        self._digests = {}
        self._health_refreshed = {}     # {host: when its read_at was last written}
        self._lock = threading.Lock()

    def report(self, ctx, host, rp_name, devices):
        # A health reading's time changes every cycle: it is no change (issue 38;
        # health_ops.refresh_read_at keeps "last read" current on quiet cycles).
        digest = hashlib.sha1(json.dumps([rp_name, health_ops.without_read_at(devices)],
                                         sort_keys=True).encode()).hexdigest()
        with self._lock:
            quiet = self._digests.get(host) == digest
        if quiet:
            # Outside the lock: other hosts' reports do not wait on this write.
            health_ops.refresh_read_at(self.database, host, devices,
                                       self._health_refreshed)
            return {'changed': False, 'placement_writes': 0}
        parsed = [objects.DriverDevice.from_dict(d) for d in devices]
        # Per-report state: reports of several hosts run in parallel.
        state = placement_sync.SyncState()
        parsed = self.placement_sync.without_nova_owned(state, host, rp_name, parsed)
        changes = diff.ReportDiff(self.database)
        removed_rps = changes.persist(ctx, host, parsed)
        writes = self.placement_sync.sync(state, host, rp_name, removed_rps)
        # A change held back for an in-use handle or device must be retried on the
        # next cycle even though the report itself will not change.
        if writes is not None and not changes.deferred:
            with self._lock:
                self._digests[host] = digest
        result = {'changed': True, 'placement_writes': writes or 0}
        if state.error is not None:
            # The agent logs it too: its operator reads the agent's log first.
            err = state.error
            result['error'] = {'code': err.code, 'message': str(err)}
        return result

    def forget(self, host=None):
        """Make the next report of ``host`` (of every host with None) go through
        even if it is the same as the last one."""
        with self._lock:
            if host is None:
                self._digests.clear()
            else:
                self._digests.pop(host, None)

"""First registrations written together: the first reports of hosts Steward has
no row of, from every agent that reports at about the same moment, in one batch.

A fleet's first cycle (a new region, a conductor database restored empty) is one
first report per host. One at a time, each cost the conductor a transaction of
its own (an ORM flush per table) and Placement five requests: the compute node
looked up by name (and created, without Nova), the device provider created, its
traits and its inventory. In a batch, the rows of every host go in one
transaction with one INSERT per table, and Placement gets, per host, the compute
node (created without a lookup when Steward creates compute nodes: a host with no
row is almost never in Placement; a 409 finds the one there, Nova's say), the
device provider created, its traits, and one ``POST /reshaper`` for the
inventories of the whole batch (steward/placement/tree_sync.py). A compute node
that was there already (Nova's) has its tree listed first, one host at a time or,
in a burst, every host's from one listing of Placement's providers
(steward/conductor/report/trees.py), and devices Nova hands out are left out as
the usual way leaves them out (PlacementSync.without_nova_owned).

Reports wait in a queue; ``WORKERS`` threads each take what gathers within
``GATHER`` seconds of its first report (at most ``MAX_BATCH``) and answer each
report's caller. Whatever is not plainly a first registration (the host has a
row, two hosts share a compute node, the compute node is missing and Steward may
not create it, Placement fails, the batch's transaction fails) is handed back,
and the caller's thread takes the report through the usual diff
(steward/conductor/report/diff.py), which judges it with the whole host's rows.
"""
import collections
import concurrent.futures
import functools
import logging
import queue
import threading
import time

from oslo_db import exception as db_exc
from oslo_utils import uuidutils

from steward.arqs import device_ops
from steward.common import context
from steward.common import exception
from steward.common import states
from steward.conductor import health_ops
from steward.conductor.device_match import canonical, identity_of
from steward.conductor.report import diff
from steward.conductor.report import digests
from steward.conductor.report import placement_sync
from steward.conductor.report import providers
from steward.conductor.report import trees as trees_mod
from steward.db import devices as device_db
from steward.db import discoveries

LOG = logging.getLogger(__name__)

# Batches written at once: while one waits on Placement the next is in the
# database. Two keep both busy.
WORKERS = 2
MAX_BATCH = 64
GATHER = 0.05
# Compute nodes created at once (Placement serves them from its own workers).
_PARALLEL = 8


class Pending:
    """One report waiting for its batch; ``result`` None: go the usual way."""

    def __init__(self, host, rp_name, devices, digest=None):
        self.host, self.rp_name, self.devices = host, rp_name, devices
        # (the report's digest, its newest health reading time) or None.
        self.digest = digest
        self.result = None
        self.done = threading.Event()


class FirstRegistrations:
    """The batches of one conductor's Reporter: ``database`` its Database,
    ``sync`` its placement_sync.PlacementSync."""

    def __init__(self, database, sync, stored=None):
        self.database = database
        self.sync = sync
        # The conductor's digests.StoredDigests: told what the batches store.
        self.stored = stored
        # Beside Nova: the compute nodes' trees of a burst, from one listing.
        self.trees = trees_mod.Trees(sync.placement)
        self._queue = queue.SimpleQueue()
        self._workers = []
        self._lock = threading.Lock()
        # rp_uuid -> batches writing it (rows committed, Placement not yet done).
        self._registering = collections.Counter()

    def register(self, host, rp_name, devices, digest=None):
        """The result of ``devices`` (DriverDevices) registered as ``host``'s
        first report, or None when the caller must take the report the usual
        way. ``digest``: (the report's digest, steward/common/report_digest.py,
        its newest health reading time), stored for the host once its rows and
        providers are in place."""
        if not devices or self.sync.placement is None:
            return None
        item = Pending(host, rp_name, devices, digest)
        self._start()
        self._queue.put(item)
        item.done.wait()
        return item.result

    def registering(self):
        """The providers whose rows are committed and whose Placement writes are
        under way: the drift repair (steward/conductor/selfheal.py) leaves them be."""
        with self._lock:
            return frozenset(self._registering)

    def _start(self):
        with self._lock:
            while len(self._workers) < WORKERS:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name='steward-first-registration')
                worker.start()
                self._workers.append(worker)

    def _work(self):
        while True:
            batch = [self._queue.get()]
            # Reports arrive one RPC thread at a time: what arrives within GATHER
            # of the first goes with it (a first registration can wait that long).
            deadline = time.monotonic() + GATHER
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get(
                        timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            try:
                self._run(batch)
            except Exception:  # noqa: BLE001 - the usual way still works for each
                LOG.exception('First registration of %d hosts failed; each goes '
                              'the usual way', len(batch))
                for item in batch:
                    item.result = None
            finally:
                for item in batch:
                    item.done.set()

    def _run(self, batch):
        by_host = {}
        for item in batch:
            # The same host twice in one batch (an agent's retry): the usual way.
            by_host.setdefault(item.host, []).append(item)
        items = [group[0] for group in by_host.values() if len(group) == 1]
        with self.database.reader() as s:
            known = discoveries.hosts_with_devices(s, [i.host for i in items])
        items = [i for i in items if i.host not in known]
        items = self._with_compute_node(items)
        if not items:
            return
        plans = {item.host: [_device_plan(item.host, rep) for rep in item.devices]
                 for item in items}
        rps = [dep['rp_uuid'] for devices in plans.values() for plan in devices
               for dep in plan['deployables']]
        # From before the commit: a drift repair running between the commit and
        # the Placement writes would take the providers for broken ones.
        with self._lock:
            self._registering.update(rps)
        try:
            self._write(items, plans)
        finally:
            with self._lock:
                self._registering.subtract(rps)
                self._registering += collections.Counter()    # drops the zeros

    def _write(self, items, plans):
        healths = {}
        for item in items:
            for plan, rep in zip(plans[item.host], item.devices):
                reading = health_ops.parse(getattr(rep, 'health', None), plan['uuid'])
                columns = health_ops.columns_of_first(reading)
                if columns is not None:
                    # Written with the row (one INSERT for the batch), not read
                    # back and updated.
                    plan.update(columns)
                elif reading is not None:
                    healths[plan['uuid']] = reading
        try:
            dep_ids = self._insert(plans, healths)
        except db_exc.DBError as err:
            # A host registered meanwhile (another conductor, a retry), a
            # duplicate name: the usual way judges each host with its rows.
            LOG.info('First registration of %d hosts in one transaction refused (%s); '
                     'each goes the usual way', len(items), err)
            return
        for item in items:
            for plan in plans[item.host]:
                LOG.info('device %s: discovered on %s (%s %s)', plan['uuid'], item.host,
                         plan['type'], plan['cpid']['cpid_info'])
        self._mirror(items, plans, dep_ids)

    def _with_compute_node(self, items):
        """The items whose compute-node provider is known, each with ``root`` (its
        uuid) and ``tree`` (the providers under it: none when this call created
        it), their devices Nova hands out dropped as the usual way drops them
        (PlacementSync.without_nova_owned). The others go the usual way: two
        hosts under one compute node, a compute node missing while Steward may
        not create it (the usual way reports that), Placement failing."""
        def find(item):
            try:
                if self.sync.create_compute_node:
                    # A host with no row is almost never in Placement yet:
                    # created without a lookup; a 409 finds the one there.
                    root = self.sync.create_new_compute_node(item.rp_name)
                    if root is not None:
                        item.root, item.tree = root, []
                        return item
                state = placement_sync.SyncState()
                if item.rp_name in listed:
                    root, state.tree = listed[item.rp_name]
                    self.sync.remember_compute_node(item.rp_name, root)
                kept = self.sync.without_nova_owned(state, item.host, item.rp_name,
                                                    item.devices)
            except exception.StewardError as err:
                LOG.info('Compute node %s of %s: %s; the report goes the usual way',
                         item.rp_name, item.host, err)
                return None
            if state.tree is None:
                return None     # not listed: the usual way says why
            if not kept:
                # Every device is Nova's (logged once, above): nothing to write.
                item.result = {'changed': True, 'placement_writes': 0}
                return None
            item.root = self.sync.compute_node(state, item.rp_name)
            item.tree, item.devices = state.tree, kept
            return item

        rp_names = {}
        for item in items:
            rp_names.setdefault(item.rp_name, []).append(item)
        # Two hosts under one compute node: the usual way, one after the other.
        items = [group[0] for group in rp_names.values() if len(group) == 1]
        # Nova's compute nodes: their trees from one listing in a burst (a
        # compute node Steward creates needs no read).
        listed = {} if self.sync.create_compute_node else self.trees.lookup(
            [item.rp_name for item in items])
        # A listed one is found in memory (a Nova-named provider under it costs a
        # read); the others each cost Placement a request or two, made in parallel.
        found = [find(i) for i in items if i.rp_name in listed]
        alone = [i for i in items if i.rp_name not in listed]
        if len(alone) < 2:
            found += [find(i) for i in alone]
        else:
            with concurrent.futures.ThreadPoolExecutor(min(_PARALLEL, len(alone))) as pool:
                found += pool.map(find, alone)
        return [item for item in found if item is not None]

    def _insert(self, plans, healths):
        """``healths``: {device uuid: its health reading (health_ops.parse)}, applied
        in the same transaction as the usual diff applies them (issue 38)."""
        with self.database.writer() as s:
            # Checked again where it counts: inside the writing transaction.
            again = discoveries.hosts_with_devices(s, list(plans))
            if again:
                raise db_exc.DBError(f'hosts registered meanwhile: {sorted(again)}')
            dep_ids = discoveries.first_registration_insert(
                s, [d for devices in plans.values() for d in devices])
            ctx = context.get_admin_context()
            for host, devices in plans.items():
                for plan in devices:
                    reading = healths.get(plan['uuid'])
                    if reading is not None:
                        health_ops.apply(s, ctx, device_db.device_get(s, plan['uuid']),
                                         reading, actor=f'agent {host}')
            return dep_ids

    def _mirror(self, items, plans, dep_ids):
        specs, host_of, ids = [], {}, {}
        for item in items:
            members = [providers.Member.of(
                dep_ids[dep['uuid']], dep['rp_uuid'], dep['name'], dep['num_accelerators'],
                [(k, v) for k, v, _ in dep['attributes']])
                for plan in plans[item.host] for dep in plan['deployables']]
            # The rule PlacementSync.sync applies to a host's rows (providers.py).
            for provider in providers.group(members):
                specs.append(provider.spec(item.root, functools.partial(
                    device_ops.current_reserved, self.sync.deps,
                    provider.deployable_ids[0])))
                host_of[provider.rp_uuid] = item.host
                ids[provider.rp_uuid] = provider.deployable_ids
        # A new provider has no inventory, so no allocation and no bind yet: the
        # rows just written are what reserved_now reads.
        # A provider in none of the trees listed is new: created without a read.
        tree = [rp for item in items for rp in item.tree]
        # Rows just inserted: what this client remembers of their providers (a
        # drift repair synced one) may predate another conductor deleting them
        # (placement_sync's module doc). In a fleet's first cycle none is
        # remembered: no request more.
        for uuid in ids:
            self.sync.placement.forget(uuid)
        writes, errors = self.sync.placement.sync_providers(
            specs, tree=tree, reserved_now=lambda chunk: placement_sync.reserved_now(
                self.database, [i for spec in chunk for i in ids[spec.uuid]]))
        failed = collections.defaultdict(list)
        for uuid, err in errors.items():
            LOG.error('Placement sync of %s failed: %s', uuid, err)
            failed[host_of[uuid]].append(err)
        # The batch's writes spread over its hosts, as whole requests adding up to
        # what was sent: the compute node each, the rest shared (the reshape is one
        # write for all).
        share, extra = divmod(writes, len(items))
        for i, item in enumerate(items):
            created = 0 if item.tree else 1        # its compute node, created here
            item.result = {'changed': True, 'placement_writes':
                           created + share + (1 if i < extra else 0)}
            if failed[item.host]:
                err = failed[item.host][0]
                item.result['error'] = {'code': getattr(err, 'code', 'placement'),
                                        'message': str(err)}
        # Each host's report digest, in one statement for the batch: their next
        # reports are quiet whichever conductor takes them.
        done = {item.host: item.digest for item in items
                if item.digest and 'error' not in item.result}
        if done:
            if digests.store(self.database, done) and self.stored is not None:
                self.stored.remember(done)
            for item in items:
                if item.host in done:
                    item.result['digest'] = item.digest[0]


def _device_plan(host, rep):
    """The rows of one reported device, as discoveries.first_registration_insert
    takes them; what ReportDiff._add_device and _diff_deployables write for a device
    they have never seen."""
    excluded = diff.excluded_reason(rep.std_board_info)
    device = {'uuid': uuidutils.generate_uuid(), 'type': rep.type, 'vendor': rep.vendor,
              'model': rep.model, 'std_board_info': rep.std_board_info,
              'vendor_board_info': rep.vendor_board_info, 'hostname': host,
              'identity': identity_of(rep), 'status': states.DEVICE_STATUS_ENABLED,
              'device_state': states.DEV_ERROR if excluded else states.DEV_AVAILABLE,
              'last_error': f'excluded: {excluded}' if excluded else None,
              # Set from an ok reading (FirstRegistrations._write); the same keys
              # in every record of the batch's INSERT.
              'health': None, 'health_conditions': None, 'health_read_at': None}
    device['cpid'] = {'uuid': uuidutils.generate_uuid(),
                      'cpid_type': rep.controlpath_id.cpid_type,
                      'cpid_info': canonical(rep.controlpath_id.cpid_info)}
    device['deployables'] = [{
        'uuid': uuidutils.generate_uuid(), 'name': dep.name,
        'num_accelerators': dep.num_accelerators, 'rp_uuid': providers.reported_rp_uuid(dep),
        'driver_name': dep.driver_name,
        # The last value of a key counts, as in ReportDiff._diff_attributes.
        'attributes': [(k, v, uuidutils.generate_uuid()) for k, v in
                       {a.key: a.value for a in dep.attribute_list}.items()],
        'handles': [{'uuid': uuidutils.generate_uuid(), 'attach_type': h.attach_type,
                     'attach_info': canonical(h.attach_info)}
                    for h in dep.attach_handle_list]}
        for dep in rep.deployable_list]
    return device

"""An agent's report turned into database changes: the diff of what a host's
driver discovered against the rows stored for that host.

Devices are matched by identity (an NVMe drive's serial and subsystem NQN, which
survive a new PCI address), else by control-path id; deployables by name,
attributes by key, attach handles by their attach_info text (upstream's
report_data rules).

A device that vanishes while it is not ``available`` (in use, awaiting or under
cleanup, in error) is never forgotten: its row, state, deployables and Placement
reservation stay, ``missing_since`` says since when, and it comes back in the
state it left. Deleting it would forget that it may hold a tenant's data, or
orphan the tenant's allocation (an upstream defect). Deployables that vanish
while a handle is in use are kept (and logged) until released.

What the diff leaves behind is mirrored to Placement afterwards
(steward/conductor/report/placement_sync.py): the diff hands it the providers of
the deployables it removed, and of those it inserted (``inserted_rps``: new to
the database, or back after it was removed), whose providers another conductor
may have deleted since this one's Placement client last saw them.
"""
import collections
import json
import logging

from oslo_utils import timeutils
from oslo_utils import uuidutils
from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import states
from steward.conductor import health_ops
from steward.conductor.device_match import canonical, match_devices
from steward.conductor.report import providers
from steward.db import attributes as attribute_db
from steward.db import devices as device_db
from steward.db import discoveries
from steward.db import transitions
from steward.db import models as m
from steward.db import retry

LOG = logging.getLogger(__name__)


# Tags a handle keeps its identity through: changing one updates the handle
# (once it is released) instead of replacing it.
MUTABLE_HANDLE_KEYS = ('managed', 'live_migratable', 'numa_node')


def handle_identity(info):
    """What makes two attach handles the same handle across discoveries."""
    try:
        d = json.loads(info)
    except (TypeError, ValueError):
        return info
    if not isinstance(d, dict):
        return info
    return json.dumps({k: v for k, v in d.items() if k not in MUTABLE_HANDLE_KEYS},
                      sort_keys=True)


# std_board_info keys a cleanable device's driver locks in at discovery (spec 1):
# kept as stored while the device is neither available nor in error, so a cleanup
# in flight (or a retry of it) runs the action it was released with.
LOCKED_BOARD_KEYS = ('cleanup_action', 'cleanup')
LOCK_FREE_STATES = (states.DEV_AVAILABLE, states.DEV_ERROR)


def _board(text):
    try:
        board = json.loads(text or '{}')
    except (TypeError, ValueError):
        return None
    return board if isinstance(board, dict) else None


def excluded_reason(board_text):
    """Why the driver keeps a device out of the pool (its cleanup policy cannot be
    met), from the reported std_board_info; None when it may be used."""
    board = _board(board_text) or {}
    cleanup = board.get('cleanup')
    return cleanup.get('excluded') if isinstance(cleanup, dict) else None


def locked_board_info(device, reported):
    """The std_board_info to store: the reported one, except that the locked-in
    cleanup keys of a device being used or cleaned keep their stored values."""
    if device.device_state in LOCK_FREE_STATES or device.device_state is None or \
            not device_ops.supports_cleaning(device):
        return reported
    old, new = _board(device.std_board_info), _board(reported)
    if old is None or new is None:
        return reported
    for key in LOCKED_BOARD_KEYS:
        if key in old:
            new[key] = old[key]
        else:
            new.pop(key, None)
    return json.dumps(new, sort_keys=True)



class ReportDiff:
    """The database side of one report, made once (``persist``).

    ``deferred`` is True when a change was held back (an in-use handle or
    deployable, a device missing but not in error): the report must be looked at
    again next cycle even if it stays the same. ``inserted_rps``: the providers
    of the deployables ``persist`` inserted.
    """

    def __init__(self, database):
        self.database = database
        self.deferred = False
        self.inserted_rps = []
        # [(deployable id, its provider, its pool's)] of deployables in use whose
        # pool changed: report/reshape.py moves them with their allocations.
        self.reshapes = []
        # The host's deployables as loaded with the report, by device id and by
        # name (persist fills them).
        self._deps_by_device = {}
        self._deps_by_name = {}

    @retry.on_deadlock
    def persist(self, ctx, host, reported):
        """Write the diff of ``reported`` (DriverDevices) against the host's rows in
        one transaction, retried after a deadlock; returns the providers of the
        deployables it removed, for Placement's sync to delete."""
        removed_rps = []
        # A retry after a deadlock inserts them all again.
        self.inserted_rps = []
        self.reshapes = []
        with self.database.writer() as s:
            # The host's devices stay locked until this report commits: a bind
            # committing in between would otherwise find its device's locked-in
            # cleanup keys rewritten from a state read before the bind (PostgreSQL
            # runs at READ COMMITTED). In id order, as binds lock them.
            existing = discoveries.host_devices_locked(s, host)
            dev_ids = [d.id for d in existing]
            cpid_by_device = discoveries.controlpath_ids_by_device(s, dev_ids)
            deps = discoveries.deployables_of_devices(s, dev_ids)
            dep_ids = [d.id for d in deps]
            attrs = attribute_db.attributes_by_deployable(s, dep_ids)
            handles = discoveries.handles_by_deployable(s, dep_ids)

            deps_by_device = {}
            for dep in deps:
                deps_by_device.setdefault(dep.device_id, []).append(dep)
            self._deps_by_device = deps_by_device
            deps_by_name = {}
            for dep in deps:
                deps_by_name.setdefault(dep.name, []).append(dep)
            self._deps_by_name = deps_by_name

            matches = match_devices(existing, cpid_by_device, reported)
            was_at = self._release_addresses(s, matches, existing, cpid_by_device)
            seen = set()
            for rep, device, ident in matches:
                if device is None:
                    device, cpid = self._add_device(s, host, rep, ident)
                    deps_by_device[device.id] = []
                    cpid_by_device[device.id] = cpid
                else:
                    self._returned(device, cpid_by_device[device.id], rep, ident,
                                   was_at.get(device.id))
                    self._update_device(device, rep)
                    self._exclude_if_needed(s, ctx, device, host)
                    self._recognise_imported(device, rep.deployable_list,
                                             deps_by_device.get(device.id, []))
                # Issue 38: the health read with the device (health_ops).
                health_ops.apply(s, ctx, device, health_ops.parse(rep.health, device.uuid),
                                 actor=f'agent {host}')
                seen.add(device.id)
                removed_rps += self._diff_deployables(
                    s, device, cpid_by_device[device.id], rep.deployable_list,
                    deps_by_device.get(device.id, []), attrs, handles)
            for device in existing:
                if device.id in seen:
                    continue
                # An imported device no discovery has found yet is another
                # driver's (or one Steward lacks): kept, never deleted.
                if device.device_state == states.DEV_AVAILABLE and \
                        device.imported_from is None:
                    removed_rps += self._remove_device(
                        s, device, cpid_by_device.get(device.id),
                        deps_by_device.get(device.id, []), attrs, handles)
                else:
                    self._keep_missing(device, host)
            s.flush()
            # A provider that changed hands (another device took the address) is
            # synced for its new owner, not deleted.
            kept = discoveries.host_provider_uuids(s, host)
        return [rp for rp in dict.fromkeys(removed_rps) if rp not in kept]

    @staticmethod
    def _release_addresses(s, matches, existing, cpid_by_device):
        """Before any device takes a control-path id, whoever holds it gives it up:
        a device that moved (matched elsewhere), and a device not reported whose
        id a reported one claims (a missing drive whose slot holds another drive
        now). At most one device of a host holds an id at any time (the unique
        constraint), even while devices swap slots. Returns {device id: the id it
        held} for what was released."""
        claimed = {canonical(rep.controlpath_id.cpid_info) for rep, _, _ in matches}
        wanted = {device.id: canonical(rep.controlpath_id.cpid_info)
                  for rep, device, _ in matches if device is not None}
        was_at = {}
        for device in existing:
            cpid = cpid_by_device.get(device.id)
            if cpid is None:
                continue
            held = canonical(cpid.cpid_info)
            if wanted.get(device.id) == held or \
                    (device.id not in wanted and held not in claimed):
                continue
            was_at[device.id] = cpid.cpid_info
            cpid.cpid_info = m.released_cpid(device.uuid)
            if device.id not in wanted:
                LOG.warning('device %s (%s, %s) gives up %s to the device reported '
                            'there now', device.uuid, device.identity,
                            device.device_state, held)
        if was_at:
            s.flush()
        return was_at

    @staticmethod
    def _returned(device, cpid, rep, ident, was_at=None):
        """A stored device matched a reported one: note where it is now, who it is,
        and that it is back."""
        info = canonical(rep.controlpath_id.cpid_info)
        if cpid.cpid_info != info:
            LOG.info('device %s (%s): now at %s, was at %s', device.uuid,
                     device.identity or ident, info, was_at or cpid.cpid_info)
            cpid.cpid_info, cpid.cpid_type = info, rep.controlpath_id.cpid_type
        if ident and device.identity != ident:
            device.identity = ident
        if device.missing_since is not None:
            LOG.info('device %s: reported again by %s after missing since %s; it is '
                     'still %s', device.uuid, device.hostname,
                     device.missing_since.isoformat(), device.device_state)
            device.missing_since = None

    @staticmethod
    def _recognise_imported(device, reported, existing):
        """The first discovery of a device imported from Cyborg (steward db
        import-cyborg): it is Steward's now. A deployable its driver names otherwise
        keeps Cyborg's name, and so its provider; the reported name is recorded."""
        if device.imported_from is None:
            return
        LOG.info('device %s (imported from %s): recognised by discovery on %s',
                 device.uuid, device.imported_from, device.hostname)
        device.imported_from = None
        names = {d.name for d in existing} | {d.discovered_as for d in existing}
        new = [r for r in reported if r.name not in names]
        unreported = [d for d in existing
                      if d.name not in {r.name for r in reported}]
        if len(new) == 1 and len(unreported) == 1:
            dep = unreported[0]
            dep.discovered_as = new[0].name
            LOG.info('deployable %s (imported) is reported as %s: it keeps its name '
                     'and provider %s', dep.name, dep.discovered_as, dep.rp_uuid)

    def _keep_missing(self, device, host):
        """Not reported, not available: kept with its deployables and reservation."""
        if device.missing_since is None:
            device.missing_since = timeutils.utcnow()
            LOG.warning('device %s (%s) is no longer discovered on %s but is %s: kept, '
                        'reserved in Placement and never handed out until it is '
                        'reported again', device.uuid, device.type, host,
                        device.device_state)
        if device.device_state != states.DEV_ERROR:
            # It may still change without a report (a release, a cleanup's end):
            # look again next cycle even if the report stays the same.
            self.deferred = True

    def _add_device(self, s, host, rep, ident=None):
        excluded = excluded_reason(rep.std_board_info)
        device = m.Device(uuid=uuidutils.generate_uuid(), type=rep.type,
                          vendor=rep.vendor, model=rep.model,
                          std_board_info=rep.std_board_info,
                          vendor_board_info=rep.vendor_board_info, hostname=host,
                          identity=ident, status=states.DEVICE_STATUS_ENABLED,
                          device_state=states.DEV_ERROR if excluded
                          else states.DEV_AVAILABLE)
        if excluded:
            device.last_error = f'excluded: {excluded}'
            # The agent's driver logged the reason (once); this only adds the uuid.
            LOG.debug('device %s on %s: kept in error: %s',
                      device.uuid, host, excluded)
        s.add(device)
        s.flush()
        cpid = m.ControlpathID(uuid=uuidutils.generate_uuid(), device_id=device.id,
                               hostname=host, cpid_type=rep.controlpath_id.cpid_type,
                               cpid_info=canonical(rep.controlpath_id.cpid_info))
        s.add(cpid)
        s.flush()
        LOG.info('device %s: discovered on %s (%s %s)', device.uuid, host, rep.type,
                 cpid.cpid_info)
        return device, cpid

    @staticmethod
    def _update_device(device, rep):
        for field in ('type', 'vendor', 'model', 'std_board_info', 'vendor_board_info'):
            value = getattr(rep, field)
            if field == 'std_board_info':
                value = locked_board_info(device, value)
            if getattr(device, field) != value:
                setattr(device, field, value)

    @staticmethod
    def _exclude_if_needed(s, ctx, device, host):
        """An available device whose cleanup policy can no longer be met goes to
        error: it must not be handed out when it could not be cleaned after."""
        reason = excluded_reason(device.std_board_info)
        if reason and device.device_state == states.DEV_AVAILABLE:
            s.flush()
            transitions.advance(s, m.Device, device, states.DEV_ERROR, event='fail',
                           reason=f'excluded: {reason}', request_id=ctx.request_id,
                           actor=f'agent {host}')

    def _diff_deployables(self, s, device, cpid, reported, existing, attrs, handles):
        removed = []
        by_name = {d.name: d for d in existing}
        # An imported deployable keeps Cyborg's name (its provider's) under the
        # name Steward's driver reports.
        by_name.update({d.discovered_as: d for d in existing
                        if d.discovered_as and d.discovered_as not in by_name})
        names = set()
        held = self._held_single(s, device, existing, {r.name for r in reported},
                                 handles)
        pairs = []
        for rep in reported:
            names.add(rep.name)
            dep = by_name.get(rep.name)
            if dep is None and held is not None:
                # Two deployables would make it a two-accelerator device, whose
                # reservation rule leaves the new one offered while it is in use.
                self.deferred = True
                LOG.warning('device %s is now reported as %s but %s is in use; the new '
                            'name applies once it is released', device.uuid, rep.name,
                            held.name)
                continue
            if dep is None and not self._free_name(s, device, rep.name, attrs, handles):
                continue
            if dep is None:
                dep = m.Deployable(uuid=uuidutils.generate_uuid(), name=rep.name,
                                   num_accelerators=rep.num_accelerators,
                                   device_id=device.id, rp_uuid=providers.reported_rp_uuid(rep),
                                   driver_name=rep.driver_name)
                s.add(dep)
                self._deps_by_name.setdefault(dep.name, []).append(dep)
                self.inserted_rps.append(dep.rp_uuid)
            else:
                if dep.num_accelerators != rep.num_accelerators:
                    dep.num_accelerators = rep.num_accelerators
                if dep.driver_name != rep.driver_name:
                    dep.driver_name = rep.driver_name
                removed += self._move_to_provider(dep, rep, handles.get(dep.id, []))
            pairs.append((rep, dep))
        # One flush for all of the device's new deployables (their ids are needed
        # below): inserted as one batch, not one statement and flush each.
        s.flush()
        for rep, dep in pairs:
            self._diff_attributes(s, dep, rep.attribute_list, attrs.get(dep.id, []))
            self._diff_handles(s, dep, cpid, rep.attach_handle_list,
                               handles.get(dep.id, []))
        for dep in existing:
            if dep.name not in names and dep.discovered_as not in names:
                removed += self._remove_deployable(s, dep, attrs, handles)
        return removed

    def _move_to_provider(self, dep, rep, handles):
        """A deployable whose pool changed (an entry tagged ``pool`` or untagged,
        issue 52) moves to the provider it belongs to now: a free one here,
        returning the provider it left (deleted by the sync once no deployable of
        the host is on it); one in use is listed in ``reshapes``, moved after the
        sync with its instance's allocation (report/reshape.py). An imported
        deployable keeps Cyborg's provider."""
        wanted = providers.reported_rp_uuid(rep)
        if dep.rp_uuid == wanted or dep.rp_uuid is None or dep.discovered_as:
            return []
        if any(h.in_use for h in handles):
            # Moved with its instance's allocation after the sync, in one
            # Placement transaction for the host (report/reshape.py).
            self.deferred = True
            self.reshapes.append((dep.id, dep.rp_uuid, wanted))
            LOG.info('deployable %s is in use on provider %s; it moves to provider %s '
                     '(%s) with its instance\'s allocation', dep.name, dep.rp_uuid,
                     wanted, providers.provider_name(rep.name, rep.pool))
            return []
        left, dep.rp_uuid = dep.rp_uuid, wanted
        self.inserted_rps.append(wanted)
        LOG.info('deployable %s: moved from provider %s to %s (%s)', dep.name, left,
                 wanted, providers.provider_name(rep.name, rep.pool))
        return [left]

    @staticmethod
    def _held_single(s, device, existing, names, handles):
        """The in-use deployable of a single-accelerator device that is reported
        under another name (it moved while bound), or None."""
        if not reservation.policy(s, device, existing).single:
            return None
        return next((d for d in existing if d.name not in names and
                     any(h.in_use for h in handles.get(d.id, []))), None)

    def _free_name(self, s, device, name, attrs, handles):
        """Make ``name`` (and so its provider) free for ``device``: another device of
        the host holding it (a missing one whose slot now holds another drive) gives
        it up and keeps its state without it. False while it is in use there."""
        # From the host's deployables loaded with the report, not a query per name:
        # a query would flush the pending rows first, one flush per deployable.
        others = [d for d in self._deps_by_name.get(name, ())
                  if d.device_id != device.id]
        for dep in others:
            owner = device_db.device_get_by_id(s, dep.device_id)
            if any(h.in_use for h in handles.get(dep.id, [])):
                self.deferred = True
                LOG.warning('deployable %s is in use by device %s; device %s gets it '
                            'once it is released', name, owner.uuid, device.uuid)
                return False
            self._remove_deployable(s, dep, attrs, handles)
            held = self._deps_by_device.get(dep.device_id, [])
            if dep in held:
                held.remove(dep)
            LOG.warning('deployable %s now stands for device %s; device %s (%s), last '
                        'seen there, keeps its state without it until it is reported '
                        'again', name, device.uuid, owner.uuid, owner.device_state)
        return True

    @staticmethod
    def _diff_attributes(s, dep, reported, existing):
        by_key = {a.key: a for a in existing}
        wanted = {a.key: a.value for a in reported}
        # A trait stored under another trait key (upstream's fake driver says
        # traits1, Steward's trait0: a device imported from Cyborg) is the same
        # attribute renamed, not a new one.
        for key, value in wanted.items():
            if key.startswith('trait') and key not in by_key:
                old = next((a for k, a in by_key.items() if k.startswith('trait')
                            and k not in wanted and a.value == value), None)
                if old is not None:
                    del by_key[old.key]
                    old.key = key
                    by_key[key] = old
        for key, value in wanted.items():
            attr = by_key.get(key)
            if attr is None:
                s.add(m.Attribute(uuid=uuidutils.generate_uuid(), deployable_id=dep.id,
                                  key=key, value=value))
            elif attr.value != value:
                attr.value = value
        for key, attr in by_key.items():
            if key not in wanted:
                s.delete(attr)

    def _diff_handles(self, s, dep, cpid, reported, existing):
        """Match handles by identity (attach_info without mutable keys such as
        ``managed``) as multisets: an mdev type reports one identical handle per
        instance, so counts matter, not just presence."""
        have, want = collections.defaultdict(list), collections.defaultdict(list)
        for h in sorted(existing, key=lambda h: (not h.in_use, h.id)):
            # A handle imported in use holds Cyborg's attach info until released;
            # discovered_as is what Steward's driver reports for it.
            have[handle_identity(h.discovered_as or h.attach_info)].append(h)
        for h in reported:
            want[handle_identity(h.attach_info)].append(h)
        for key in set(have) | set(want):
            rows, wanted = have[key], want[key]
            for row, rep in zip(rows, wanted):
                info = canonical(rep.attach_info)
                if row.attach_info != info or row.attach_type != rep.attach_type:
                    if row.in_use:
                        # Never change how a bound handle is attached (spec 4);
                        # applied on a later cycle once it is released.
                        self.deferred = True
                        LOG.warning('Attach handle %s is in use; its new attach info %s '
                                    'applies once it is released', row.uuid, info)
                    else:
                        row.attach_info, row.attach_type = info, rep.attach_type
                        row.discovered_as = None
                elif row.discovered_as is not None and not row.in_use:
                    row.discovered_as = None
            for rep in wanted[len(rows):]:
                s.add(m.AttachHandle(uuid=uuidutils.generate_uuid(), deployable_id=dep.id,
                                     cpid_id=cpid.id, in_use=False,
                                     attach_type=rep.attach_type,
                                     attach_info=canonical(rep.attach_info)))
            for row in rows[len(wanted):]:
                if row.in_use:
                    self.deferred = True
                    LOG.warning('Attach handle %s (%s) vanished from discovery but is '
                                'in use; kept until released', row.uuid, row.attach_info)
                else:
                    s.delete(row)

    def _remove_deployable(self, s, dep, attrs, handles):
        if any(h.in_use for h in handles.get(dep.id, [])):
            self.deferred = True
            LOG.warning('Deployable %s vanished from discovery but is in use; kept '
                        'until released', dep.name)
            return []
        discoveries.deployable_detach_arqs(s, dep.id)
        for h in handles.get(dep.id, []):
            s.delete(h)
        for a in attrs.get(dep.id, []):
            s.delete(a)
        s.flush()
        s.delete(dep)
        # Now, not at the next flush: a deployable taking over the name (and its
        # provider) may be inserted next, and inserts are flushed before deletes.
        # SQLite may give that one this row's id: forget what this one held.
        s.flush()
        attrs.pop(dep.id, None)
        handles.pop(dep.id, None)
        same_name = self._deps_by_name.get(dep.name, [])
        if dep in same_name:
            same_name.remove(dep)
        LOG.info('deployable %s: removed (no longer discovered)', dep.name)
        return [dep.rp_uuid] if dep.rp_uuid else []

    def _remove_device(self, s, device, cpid, deps, attrs, handles):
        removed = []
        for dep in deps:
            removed += self._remove_deployable(s, dep, attrs, handles)
        s.flush()
        if device_db.device_handles_in_use(s, device.id) or \
                discoveries.device_deployable_count(s, device.id):
            return removed
        if cpid is not None:
            s.delete(cpid)
            s.flush()
        s.delete(device)
        LOG.info('device %s: removed (no longer discovered)', device.uuid)
        return removed


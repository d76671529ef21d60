"""Persist what an agent discovered and mirror it in Placement, as a diff.

Devices are matched by identity (an NVMe drive's serial and subsystem NQN, which
survive a new PCI address), else by control-path id; deployables by name,
attributes by key, attach handles by their attach_info text (upstream's
report_data rules). An agent whose report is byte-for-byte what it sent last time
costs one digest comparison: no database query and no Placement request.

A device that vanishes while it is not ``available`` (in use, awaiting or under
cleanup, in error) is never forgotten: its row, state, deployables and Placement
reservation stay, ``missing_since`` says since when, and it comes back in the
state it left. Deleting it would forget that it may hold a tenant's data, or
orphan the tenant's allocation (an upstream defect). Deployables that vanish
while a handle is in use are kept (and logged) until released.
"""
import collections
import functools
import hashlib
import json
import logging
import re
import threading
import uuid as uuidlib

import os_traits
from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.conductor import device_ops
from steward.conductor import reservation
from steward.conductor.device_match import canonical, match_devices
from steward.db import attributes as attribute_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import retry
from steward.db import transitions
from steward.drivers import objects

LOG = logging.getLogger(__name__)


def rp_uuid_for(name):
    """Child RP uuid: uuid3 of the deployable name, as upstream, so an existing
    cloud's providers are adopted rather than duplicated."""
    return str(uuidlib.uuid3(uuidlib.NAMESPACE_DNS, name))


# Tags a handle keeps its identity through: changing one updates the handle
# (once it is released) instead of replacing it.
MUTABLE_HANDLE_KEYS = ('managed', 'live_migratable')


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


_BDF = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')


def pci_address_like(text):
    return bool(_BDF.match(text))


# Nova's libvirt driver names a vGPU parent's provider after the nodedev:
# <host>_pci_0000_84_00_0.
_NOVA_NODEDEV = re.compile(r'_pci_([0-9a-f]{4})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])$')


def nova_provider_address(name):
    """The PCI address a provider named the way Nova names one stands for, or None:
    PCI in Placement ``<host>_<ADDRESS>`` (any case) and vGPU parents
    ``<host>_pci_<dddd>_<bb>_<ss>_<f>``."""
    name = name.lower()
    tail = name.rsplit('_', 1)[-1]
    if pci_address_like(tail):
        return tail
    m = _NOVA_NODEDEV.search(name)
    return '%s:%s:%s.%s' % m.groups() if m else None


def device_addresses(dev):
    """The PCI addresses a reported device stands for: its own and, for a VF, its
    PF's (Nova accounts VFs under the PF's provider)."""
    found = []
    try:
        cpid = json.loads(dev.controlpath_id.cpid_info)
        found.append('%(domain)s:%(bus)s:%(device)s.%(function)s' % cpid)
    except (ValueError, KeyError, TypeError):
        pass
    try:
        physfn = json.loads(dev.std_board_info or '{}').get('physfn')
    except (ValueError, AttributeError):
        physfn = None
    if isinstance(physfn, str) and pci_address_like(physfn.lower()):
        found.append(physfn.lower())
    return [a.lower() for a in found]


def reserved_now(database, deployable_ids):
    """{provider uuid: Placement reserved (None: keep Placement's)} of many
    deployables, the reservation rule on the rows as they are now: what
    device_ops.current_reserved says for one, in two queries for all of them. The
    Placement client calls it right before the write, as it calls that one."""
    if not deployable_ids:
        return {}
    with database.reader() as s:
        rows = s.execute(sa.select(m.Deployable, m.Device)
                         .join(m.Device, m.Deployable.device_id == m.Device.id)
                         .where(m.Deployable.id.in_(deployable_ids))).all()
        siblings = collections.defaultdict(list)
        for dep in s.execute(sa.select(m.Deployable).where(
                m.Deployable.device_id.in_({d.id for _, d in rows}))).scalars():
            siblings[dep.device_id].append(dep)
        return {dep.rp_uuid: reservation.policy(s, device, siblings[device.id])
                .reserved_for(dep) for dep, device in rows if dep.rp_uuid}


class Reporter:
    def __init__(self, deps, create_compute_node):
        self.database = deps.database
        self.placement = deps.placement_client
        self.create_compute_node = create_compute_node
        self._digests = {}
        self._compute_nodes = {}
        self._lock = threading.Lock()
        self._tls = threading.local()       # per-report state; reports run in parallel

    # -- entry point ---------------------------------------------------------------
    def report(self, ctx, host, rp_name, devices):
        digest = hashlib.sha1(json.dumps([rp_name, devices], sort_keys=True)
                              .encode()).hexdigest()
        with self._lock:
            if self._digests.get(host) == digest:
                return {'changed': False, 'placement_writes': 0}
        parsed = [objects.DriverDevice.from_dict(d) for d in devices]
        self._tls.deferred = False
        self._tls.error = None
        self._tls.tree = None
        self._tls.new_root = None
        parsed = self._without_nova_owned(host, rp_name, parsed)
        removed_rps = self._persist(ctx, host, parsed)
        deferred = self._tls.deferred
        writes = self._sync_placement(host, rp_name, removed_rps)
        # A change held back for an in-use handle or device must be retried on the
        # next cycle even though the report itself will not change.
        if writes is not None and not deferred:
            with self._lock:
                self._digests[host] = digest
        result = {'changed': True, 'placement_writes': writes or 0}
        if self._tls.error is not None:
            # The agent logs it too: its operator reads the agent's log first.
            err = self._tls.error
            result['error'] = {'code': err.code, 'message': str(err)}
        return result

    def _without_nova_owned(self, host, rp_name, reported):
        """Drop devices Nova already hands out (spec 1 and 4): a provider under the
        compute node named the way Nova names one (nova_provider_address: PCI in
        Placement ``<host>_<ADDRESS>``, upper-cased, VFs under their PF; vGPU
        parents ``<host>_pci_<dddd>_<bb>_<ss>_<f>``) that does not carry
        OWNER_CYBORG. Checked only when a report changed, so quiet cycles cost
        nothing."""
        if self.placement is None or not reported:
            return reported
        try:
            root = self.compute_node(host, rp_name)
            if root == self._tls.new_root:
                # Created by this report a moment ago: nothing under it to list.
                providers = []
            else:
                providers = self.placement.list_providers(in_tree=root)
        except exception.StewardError:
            return reported          # reported by _sync_placement with a clear error
        # The sync after the database diff starts from this listing: a device
        # provider not in it is new and is created without being read first.
        self._tls.tree = providers
        by_address = {}
        for rp in providers:
            address = nova_provider_address(rp['name'])
            if rp['uuid'] != root and address:
                by_address.setdefault(address, []).append(rp)
        if not by_address:
            return reported
        kept = []
        for dev in reported:
            owner = None
            for address in device_addresses(dev):
                for rp in by_address.get(address, ()):
                    if os_traits.OWNER_CYBORG not in self.placement.get_traits(rp['uuid']):
                        owner = rp
            if owner is None:
                kept.append(dev)
            else:
                LOG.error('Device %s on %s is skipped: Placement provider %s (%s) '
                          'already offers it without OWNER_CYBORG; remove it from '
                          "Nova's [pci] device_spec or from Steward's.",
                          ', '.join(device_addresses(dev)), host, owner['name'],
                          owner['uuid'])
        return kept

    def forget(self, host=None):
        with self._lock:
            if host is None:
                self._digests.clear()
            else:
                self._digests.pop(host, None)

    # -- database diff -------------------------------------------------------------
    @retry.on_deadlock
    def _persist(self, ctx, host, reported):
        removed_rps = []
        with self.database.writer() as s:
            # The host's devices stay locked until this report commits: a bind
            # committing in between would otherwise find its device's locked-in
            # cleanup keys rewritten from a state read before the bind (PostgreSQL
            # runs at READ COMMITTED). In id order, as binds lock them.
            existing = s.execute(
                sa.select(m.Device).where(m.Device.hostname == host)
                .order_by(m.Device.id).with_for_update()
                .execution_options(populate_existing=True)).scalars().all()
            dev_ids = [d.id for d in existing]
            cpids = s.execute(sa.select(m.ControlpathID).where(
                m.ControlpathID.device_id.in_(dev_ids))).scalars().all() if dev_ids else []
            deps = s.execute(sa.select(m.Deployable).where(
                m.Deployable.device_id.in_(dev_ids))).scalars().all() if dev_ids else []
            dep_ids = [d.id for d in deps]
            attrs = attribute_db.attributes_by_deployable(s, dep_ids)
            handles = {}
            if dep_ids:
                for h in s.execute(sa.select(m.AttachHandle).where(
                        m.AttachHandle.deployable_id.in_(dep_ids))).scalars():
                    handles.setdefault(h.deployable_id, []).append(h)

            cpid_by_device = {c.device_id: c for c in cpids}
            deps_by_device = {}
            for dep in deps:
                deps_by_device.setdefault(dep.device_id, []).append(dep)
            self._tls.deps_by_device = deps_by_device
            deps_by_name = {}
            for dep in deps:
                deps_by_name.setdefault(dep.name, []).append(dep)
            self._tls.deps_by_name = deps_by_name

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
            kept = set(s.execute(sa.select(m.Deployable.rp_uuid)
                                 .join(m.Device, m.Deployable.device_id == m.Device.id)
                                 .where(m.Device.hostname == host)).scalars())
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
            self._tls.deferred = True

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
                self._tls.deferred = True
                LOG.warning('device %s is now reported as %s but %s is in use; the new '
                            'name applies once it is released', device.uuid, rep.name,
                            held.name)
                continue
            if dep is None and not self._free_name(s, device, rep.name, attrs, handles):
                continue
            if dep is None:
                dep = m.Deployable(uuid=uuidutils.generate_uuid(), name=rep.name,
                                   num_accelerators=rep.num_accelerators,
                                   device_id=device.id, rp_uuid=rp_uuid_for(rep.name),
                                   driver_name=rep.driver_name)
                s.add(dep)
                self._tls.deps_by_name.setdefault(dep.name, []).append(dep)
            else:
                if dep.num_accelerators != rep.num_accelerators:
                    dep.num_accelerators = rep.num_accelerators
                if dep.driver_name != rep.driver_name:
                    dep.driver_name = rep.driver_name
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
        others = [d for d in self._tls.deps_by_name.get(name, ())
                  if d.device_id != device.id]
        for dep in others:
            owner = s.get(m.Device, dep.device_id)
            if any(h.in_use for h in handles.get(dep.id, [])):
                self._tls.deferred = True
                LOG.warning('deployable %s is in use by device %s; device %s gets it '
                            'once it is released', name, owner.uuid, device.uuid)
                return False
            self._remove_deployable(s, dep, attrs, handles)
            held = self._tls.deps_by_device.get(dep.device_id, [])
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
                        self._tls.deferred = True
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
                    self._tls.deferred = True
                    LOG.warning('Attach handle %s (%s) vanished from discovery but is '
                                'in use; kept until released', row.uuid, row.attach_info)
                else:
                    s.delete(row)

    def _remove_deployable(self, s, dep, attrs, handles):
        if any(h.in_use for h in handles.get(dep.id, [])):
            self._tls.deferred = True
            LOG.warning('Deployable %s vanished from discovery but is in use; kept '
                        'until released', dep.name)
            return []
        s.execute(sa.update(m.ExtARQ).where(m.ExtARQ.deployable_id == dep.id)
                  .values(deployable_id=None))
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
        same_name = self._tls.deps_by_name.get(dep.name, [])
        if dep in same_name:
            same_name.remove(dep)
        LOG.info('deployable %s: removed (no longer discovered)', dep.name)
        return [dep.rp_uuid] if dep.rp_uuid else []

    def _remove_device(self, s, device, cpid, deps, attrs, handles):
        removed = []
        for dep in deps:
            removed += self._remove_deployable(s, dep, attrs, handles)
        s.flush()
        if device_db.device_handles_in_use(s, device.id) or s.execute(
                sa.select(sa.func.count()).select_from(m.Deployable)
                .where(m.Deployable.device_id == device.id)).scalar():
            return removed
        if cpid is not None:
            s.delete(cpid)
            s.flush()
        s.delete(device)
        LOG.info('device %s: removed (no longer discovered)', device.uuid)
        return removed

    # -- Placement -----------------------------------------------------------------
    def compute_node(self, host, rp_name):
        with self._lock:
            cached = self._compute_nodes.get(rp_name)
        if cached:
            return cached
        rp, created = self.placement.compute_node_created(
            rp_name, create=self.create_compute_node)
        if created:
            self._tls.new_root = rp
        with self._lock:
            self._compute_nodes[rp_name] = rp
        return rp

    def _sync_placement(self, host, rp_name, removed_rps):
        """Returns the number of Placement writes, or None when Placement could not
        be brought in line (the next report retries)."""
        if self.placement is None:
            return 0
        from steward.placement.client import ProviderSpec
        try:
            root = self.compute_node(host, rp_name)
        except exception.PlacementProviderNotFound:
            err = exception.PlacementProviderNotFound(name=rp_name, host=host)
            LOG.error('%s', err)
            self._tls.error = err
            return None
        except exception.StewardError as err:
            LOG.error('%s', err)
            self._tls.error = err
            return None
        writes = 0
        with self.database.reader() as s:
            rows = s.execute(
                sa.select(m.Deployable, m.Device)
                .join(m.Device, m.Deployable.device_id == m.Device.id)
                .where(m.Device.hostname == host)).all()
            attrs = attribute_db.attributes_by_deployable(s, [d.id for d, _ in rows])
            specs, dep_of = [], {}
            for dep, _ in rows:
                rc = next((a.value for a in attrs[dep.id] if a.key == 'rc'), None)
                if rc is None or not dep.rp_uuid:
                    continue
                traits = {a.value for a in attrs[dep.id] if a.key.startswith('trait')}
                traits.add(os_traits.OWNER_CYBORG)
                specs.append(ProviderSpec(
                    uuid=dep.rp_uuid, name=dep.name, parent_uuid=root,
                    resource_class=rc, total=dep.num_accelerators,
                    traits=frozenset(traits),
                    # Read when written, not now: see device_ops.current_reserved.
                    reserved=functools.partial(device_ops.current_reserved,
                                               self.database, dep.id)))
                dep_of[dep.rp_uuid] = dep.id
        ok = True
        done, errors = self.placement.sync_providers(
            specs, tree=getattr(self._tls, 'tree', None),
            reserved_now=lambda chunk: reserved_now(self.database,
                                                    [dep_of[s.uuid] for s in chunk]))
        writes += done
        for spec in specs:
            if spec.uuid in errors:
                LOG.error('Placement sync of %s failed: %s', spec.name, errors[spec.uuid])
                ok = False
        for rp in removed_rps:
            try:
                self.placement.delete_provider(rp)
                writes += 1
            except exception.StewardError as err:
                LOG.error('Removing resource provider %s failed: %s', rp, err)
                ok = False
        return writes if ok else None

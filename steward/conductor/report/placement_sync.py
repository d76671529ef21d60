"""The result of an agent's report mirrored to Placement: one child resource
provider per deployable (per pool of deployables, issue 52:
steward/conductor/report/providers.py) under the host's compute-node provider, with its
resource class, traits, ``OWNER_CYBORG`` and reservation, and the providers of
removed deployables deleted (the Placement client, steward/placement/client.py,
writes only what differs).

Before the database diff (steward/conductor/report/diff.py), devices Nova
already hands out are dropped from the report (``without_nova_owned``); after
it, ``sync`` brings Placement in line with the host's rows.

The client's memory of a provider saves every request for it while it matches
(steward/placement/provider_cache.py), and nothing in a sync that matches it
would find out that another conductor deleted the provider meanwhile: that
conductor took a report without the device (or its deployable), the only way
Steward deletes a device provider. So the providers of the deployables the diff
inserted, the ones that may come back after such a report, are forgotten before
the sync, which creates (or reads) them: a device new to the database costs
nothing more (it was not remembered, and the tree listed before the diff says
it is absent), and a quiet report or an unchanged deployable keeps its memory.
"""
import dataclasses
import functools
import json
import logging
import re
import threading

import os_traits

from steward.arqs import device_ops
from steward.arqs import reservation
from steward.common import exception
from steward.conductor.report import providers
from steward.conductor.report import reshape
from steward.db import attributes as attribute_db
from steward.db import discoveries

LOG = logging.getLogger(__name__)


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
    """{provider uuid: Placement reserved (None: keep Placement's)} of the
    providers of many deployables, the reservation rule on the rows as they are
    now: what device_ops.current_reserved says for one, in two queries for all of
    them (a pool's every deployable counted, issue 52). The Placement client calls
    it right before the write, as it calls that one."""
    if not deployable_ids:
        return {}
    with database.reader() as s:
        rps = {dep.rp_uuid for dep, _ in discoveries.deployables_with_devices(
            s, deployable_ids) if dep.rp_uuid}
        return {rp: reservation.members_reserved(s, members)
                for rp, members in discoveries.provider_members(s, rps).items()}


@dataclasses.dataclass
class SyncState:
    """What the Placement side learns during one report."""
    # The compute node's tree as listed before the diff: the sync creates a device
    # provider not in it without reading it first.
    tree: list | None = None
    # The compute node, when this report created it (nothing under it yet).
    new_root: str | None = None
    # Why Placement could not be brought in line; the agent is told.
    error: exception.StewardError | None = None


class PlacementSync:
    """Placement's side of the reports of every host (one per conductor): the
    compute-node provider of each host is looked up (or created) once and
    remembered; what one report learns is in its ``SyncState``. ``deps``: the
    conductor's Deps (steward/conductor/deps.py)."""

    def __init__(self, deps, create_compute_node=True):
        self.deps = deps
        self.database = deps.database
        self.placement = deps.placement_client
        self.create_compute_node = create_compute_node
        self._compute_nodes = {}
        self._lock = threading.Lock()

    def without_nova_owned(self, state, host, rp_name, reported):
        """Drop devices Nova already hands out (spec 1 and 4): a provider under the
        compute node named the way Nova names one (nova_provider_address: PCI in
        Placement ``<host>_<ADDRESS>``, upper-cased, VFs under their PF; vGPU
        parents ``<host>_pci_<dddd>_<bb>_<ss>_<f>``) that does not carry
        OWNER_CYBORG. Checked only when a report changed, so quiet cycles cost
        nothing."""
        if self.placement is None or not reported:
            return reported
        try:
            root = self.compute_node(state, rp_name)
            if state.tree is not None:
                # Listed already, with the trees of many hosts (report/trees.py).
                providers = state.tree
            elif root == state.new_root:
                # Created by this report a moment ago: nothing under it to list.
                providers = []
            else:
                providers = self.placement.list_providers(in_tree=root)
        except exception.StewardError:
            return reported          # reported by sync with a clear error
        # The sync after the database diff starts from this listing: a device
        # provider not in it is new and is created without being read first.
        state.tree = providers
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


    def move_in_use(self, state, rp_name, moves):
        """report/reshape.py's move of devices in use onto their pools."""
        try:
            root = self.compute_node(state, rp_name)
        except exception.StewardError as err:
            LOG.error('%s', err)
            return False
        return reshape.move_in_use(self.deps, self.placement, root, moves)

    def compute_node(self, state, rp_name):
        with self._lock:
            cached = self._compute_nodes.get(rp_name)
        if cached:
            return cached
        rp, created = self.placement.compute_node_created(
            rp_name, create=self.create_compute_node)
        if created:
            state.new_root = rp
        self.remember_compute_node(rp_name, rp)
        return rp

    def remember_compute_node(self, rp_name, rp_uuid):
        """The compute-node provider of ``rp_name``, found or created."""
        with self._lock:
            self._compute_nodes[rp_name] = rp_uuid

    def create_new_compute_node(self, rp_name):
        """The compute-node provider of a host Steward has no row of, created without
        looking it up first (steward/conductor/report/first.py): its uuid when this
        call created it, None when it was there already (remembered either way)."""
        rp, created = self.placement.compute_node_created(rp_name, absent=True)
        self.remember_compute_node(rp_name, rp)
        return rp if created else None

    def sync(self, state, host, rp_name, removed_rps, inserted_rps=()):
        """Returns the number of Placement writes, or None when Placement could not
        be brought in line (the next report retries). ``removed_rps``: providers
        to delete; ``inserted_rps``: providers of the deployables the diff
        inserted (module doc)."""
        if self.placement is None:
            return 0
        for rp in inserted_rps:
            self.placement.forget(rp)
        try:
            root = self.compute_node(state, rp_name)
        except exception.PlacementProviderNotFound:
            err = exception.PlacementProviderNotFound(name=rp_name, host=host)
            LOG.error('%s', err)
            state.error = err
            return None
        except exception.StewardError as err:
            LOG.error('%s', err)
            state.error = err
            return None
        writes = 0
        with self.database.reader() as s:
            rows = discoveries.host_deployables(s, host)
            attrs = attribute_db.attributes_by_deployable(s, [d.id for d, _ in rows])
            members = [providers.Member.of_row(dep, attrs[dep.id]) for dep, _ in rows]
        specs, dep_of = [], {}
        for provider in providers.group(members):
            # Read when written, not now: see device_ops.current_reserved (any
            # deployable of a provider reads the whole provider's).
            specs.append(provider.spec(root, functools.partial(
                device_ops.current_reserved, self.deps, provider.deployable_ids[0])))
            dep_of[provider.rp_uuid] = provider.deployable_ids
        ok = True
        done, errors = self.placement.sync_providers(
            specs, tree=state.tree,
            reserved_now=lambda chunk: reserved_now(
                self.database, [i for spec in chunk for i in dep_of[spec.uuid]]))
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

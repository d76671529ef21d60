"""The generic mdev driver: mediated-device types of any mdev-capable parent (spec 2).

``[mdev] device_spec`` names each (parent, type) pair to report. Per parent found
in ``<sysfs_root>/class/mdev_bus`` one device (type ``MDEV``); per configured type
it offers one deployable, hence one child resource provider under the compute
node, with:

* resource class ``CUSTOM_MDEV_<TYPE>`` (or the entry's ``resource_class``);
* ``num_accelerators = available_instances + created_instances``, capped by the
  entry's ``max_instances``: ``available_instances`` drops when an mdev is created,
  whether or not a guest uses it, so existing mdevs still count as capacity;
* one ``MDEV`` attach handle per instance, all alike:
  ``{"asked_type", "domain", "bus", "device", "function"}`` (plus
  ``"live_migratable": true`` when the entry's tag says so: API 2.7, issue 32).
  Binding one only reserves it; Nova creates the mdev with the handle's uuid
  (spec 5).

A parent that is not a PCI function (the ``mtty``/``mdpy`` samples) has no PCI
address: its handles carry ``domain``, ``bus`` and ``function`` empty and its name
under ``/sys/class/mdev_bus`` in ``device``, and its control-path id is
``SYSFS`` ``{"class": "mdev_bus", "name": <name>}``.

Deployables are named ``<host>_mdev_<parent>_<type>``: the spec's
``mdev_<parent>_<type>`` behind the host name every other driver uses, because the
conductor derives the provider's uuid and Placement name from the deployable name
alone and Placement names are global; ``mtty`` or ``0000:41:00.0`` on two hosts
would otherwise be one provider.

Entries are read once, when the agent builds the driver; invalid ones are logged
at ERROR with the entry quoted and skipped.
"""
import dataclasses
import functools
import json
import logging
import os

import os_resource_classes as orc

from steward.common import exception
from steward.common import moves
from steward.drivers import base
from steward.drivers import objects
from steward.drivers.mdev import bus as mdev_bus
from steward.drivers.pci import driver as pci
from steward.drivers.pci import health as pci_health
from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

OPTION = '[mdev] device_spec'
REQUIRED_KEYS = ('address', 'mdev_type')
KNOWN_KEYS = frozenset(REQUIRED_KEYS + ('max_instances', 'resource_class', 'traits',
                                        'live_migratable'))
DEVICE_TYPE = 'MDEV'
ATTACH_TYPE = 'MDEV'


@dataclasses.dataclass(frozen=True)
class MdevEntry:
    raw: str
    address: str                    # parent name in mdev_bus (PCI address lower-cased)
    mdev_type: str
    max_instances: int | None = None
    resource_class: str | None = None
    traits: tuple = ()
    live_migratable: bool = False


def _json_text(raw):
    # The spec's own cyborg.conf example ends each value with a comma.
    text = raw.strip()
    return text[:-1] if text.endswith(',') else text


def parse_entry(raw):
    """One configured value -> MdevEntry; InvalidConfiguration quoting it."""
    def bad(reason):
        return exception.InvalidConfiguration(reason=f'{OPTION} entry {raw!r}: {reason}')
    try:
        fields = json.loads(_json_text(raw))
    except (TypeError, ValueError) as err:
        raise bad(f'not valid JSON ({err})')
    if not isinstance(fields, dict):
        raise bad('must be a JSON object')
    missing = [k for k in REQUIRED_KEYS if k not in fields]
    if missing:
        raise bad(f'{" and ".join(missing)} required')
    unknown = sorted(set(fields) - KNOWN_KEYS)
    if unknown:
        raise bad(f'unknown key(s) {unknown}; known: {sorted(KNOWN_KEYS)}')
    for key in REQUIRED_KEYS:
        if not isinstance(fields[key], str) or not fields[key].strip() \
                or '/' in fields[key]:
            raise bad(f'{key} {json.dumps(fields[key])} must be a non-empty name')
    max_instances = fields.get('max_instances')
    if max_instances is not None and (isinstance(max_instances, bool)
                                      or not isinstance(max_instances, int)
                                      or max_instances < 0):
        raise bad(f'max_instances {json.dumps(max_instances)} must be an integer >= 0')
    try:
        resource_class = pci.parse_resource_class(fields)
        traits = pci.parse_traits(fields)
        live = pci.parse_live_migratable(fields)
    except ValueError as err:
        raise bad(str(err))
    address = mdev_bus.canonical_parent(fields['address'].strip())
    return MdevEntry(raw=raw, address=address, mdev_type=fields['mdev_type'].strip(),
                     max_instances=max_instances, resource_class=resource_class,
                     traits=traits, live_migratable=live)


def load_entries(values):
    """Valid entries in configured order; invalid or repeated ones logged and skipped."""
    entries, seen = [], {}
    for raw in values or []:
        try:
            entry = parse_entry(raw)
        except exception.InvalidConfiguration as err:
            LOG.error('%s; this entry is skipped (%s)', err, err.code)
            continue
        key = (entry.address, entry.mdev_type)
        if key in seen:
            LOG.error('%s entry %r repeats parent %s type %s of entry %r; the first one '
                      'is used (cyb.config.invalid)', OPTION, raw, entry.address,
                      entry.mdev_type, seen[key])
            continue
        seen[key] = raw
        entries.append(entry)
    return entries


def default_resource_class(mdev_type):
    """CUSTOM_MDEV_<TYPE>: ``mtty-2`` -> CUSTOM_MDEV_MTTY_2."""
    return orc.normalize_name(f'MDEV_{mdev_type}')


def address_fields(parent):
    """attach_info / cpid address fields of a parent name.

    A PCI parent gives its address as upstream does (hex strings, no ``0x``); a
    virtual one has none, so its name goes in ``device`` and the rest stay empty.
    """
    try:
        return pci_sysfs.PciAddress.parse(parent).info()
    except ValueError:
        return {'domain': '', 'bus': '', 'device': parent, 'function': ''}


def controlpath_id(parent):
    try:
        return objects.DriverControlPathID(
            'PCI', objects.pci_info(**pci_sysfs.PciAddress.parse(parent).info()))
    except ValueError:
        return objects.DriverControlPathID(
            'SYSFS', json.dumps({'class': 'mdev_bus', 'name': parent}, sort_keys=True))


@functools.lru_cache(maxsize=8192)
def _attach_info(mdev_type, parent, live=False):
    info = dict(address_fields(parent), asked_type=mdev_type)
    if live:
        # Only when true: absent means false (steward.common.moves).
        info[moves.LIVE_KEY] = True
    return json.dumps(info, sort_keys=True)


def attach_handles(mdev_type, parent, count, live=False):
    """``count`` identical MDEV handles of one type: the conductor matches them as
    a multiset, and each handle's uuid becomes one mdev's uuid. ``live``: the
    entry's ``live_migratable`` tag."""
    info = _attach_info(mdev_type, parent, live)
    return [objects.DriverAttachHandle(attach_type=ATTACH_TYPE, attach_info=info)
            for _ in range(count)]


def capacity(mdev_type_info, max_instances=None):
    total = mdev_type_info['available_instances'] + mdev_type_info['created_instances']
    return total if max_instances is None else min(total, max_instances)


class MdevDriver(base.Driver):
    name = 'mdev'
    shares_parents = True

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.sysfs_root = conf.sysfs_root
        self._bus_path = os.path.join(conf.sysfs_root, 'class', 'mdev_bus', '')
        self._bus = mdev_bus.MdevBusManager(self._bus_path)
        self.entries = load_entries(conf.mdev.device_spec)
        self._by_parent = {}
        for entry in self.entries:
            self._by_parent.setdefault(entry.address, []).append(entry)
        self._problem = mdev_bus.ProblemLog(LOG)
        self._pci_ids = {}
        self.health = pci_health.Watch(conf)

    def init_host(self, context=None):
        if not self.entries:
            LOG.warning('mdev driver enabled but %s has no valid entry: no device is '
                        'reported', OPTION)
        for entry in self.entries:
            LOG.info('mdev driver: parent %s type %s -> %s (max_instances=%s, '
                     'live_migratable=%s)', entry.address, entry.mdev_type,
                     entry.resource_class or default_resource_class(entry.mdev_type),
                     entry.max_instances, entry.live_migratable)

    def discover(self):
        self._problem.new_cycle()
        parents = self._bus.discover_parent_devices(list(self._by_parent))
        for address in sorted(set(self._by_parent) - {mdev_bus.canonical_parent(p)
                                                      for p in parents}):
            self._problem(('parent', address), logging.WARNING,
                          'mdev: parent %s of %s is not in %s; its types are not '
                          'reported', address, OPTION, self._bus_path)
        present = set(parents)
        self._warn_not_pci(parents)
        self._pci_ids = {p: d for p, d in self._pci_ids.items() if p in present}
        self.health.forget(present)
        devices = []
        for parent in parents:
            entries = self._by_parent[mdev_bus.canonical_parent(parent)]
            device = self._device(parent, entries)
            if device is not None:
                devices.append(device)
        return devices

    def _warn_not_pci(self, parents):
        """Nova (34 and earlier, with or without contrib/nova) creates a Cyborg mdev
        through libvirt under the node device ``pci_<domain>_<bus>_<device>_<function>``
        built from the handle: a parent that is not a PCI function has no such node
        device, so its mdevs work with ``steward compute`` only. Said once, in one
        line, while such parents are reported."""
        virtual = [p for p in parents if not pci_sysfs.BDF_RE.match(p)]
        if virtual:
            self._problem(('not-pci', tuple(virtual)), logging.WARNING,
                          'mdev: parent(s) %s: not a PCI device, so Nova cannot '
                          'create their mdevs (it names a Cyborg mdev parent '
                          'pci_<domain>_<bus>_<device>_<function>); their types work '
                          'with steward compute only (doc/nova.md)',
                          ', '.join(virtual))

    def _device(self, parent, entries):
        offered = {t['type_name']: t for t in self._bus.get_mdev_types(
            parent, type_filter=[e.mdev_type for e in entries])}
        deployables, types = [], []
        for entry in entries:
            info = offered.get(entry.mdev_type)
            if info is None:
                self._problem(('type', parent, entry.mdev_type), logging.WARNING,
                              'mdev: parent %s does not offer type %s (or it is '
                              'unreadable); entry %r is not reported', parent,
                              entry.mdev_type, entry.raw)
                continue
            deployables.append(self._deployable(parent, entry, info))
            types.append(entry.mdev_type)
        if not deployables:
            return None
        if len(deployables) > 1:
            self._warn_shared(parent, types, deployables)
        board = {'parent': parent, 'mdev_types': types}
        vendor, model = '', parent
        pci_dev = self._pci_device(parent)
        if pci_dev is not None:
            vendor, model = pci_dev.vendor_id, pci_dev.product_id
            board.update(vendor_id=vendor, product_id=model, **{'class': pci_dev.class_code})
        return objects.DriverDevice(
            vendor=vendor, model=model, type=DEVICE_TYPE,
            controlpath_id=controlpath_id(parent), deployable_list=deployables,
            std_board_info=json.dumps(board, sort_keys=True), driver_name=self.name,
            health=self._health(parent))

    def _health(self, parent):
        """A PCI parent's AER counters and driver (read fresh: the ids cached by
        _pci_device cannot change, the driver can); None for a parent that is not
        a PCI function (nothing to read)."""
        if not pci_sysfs.BDF_RE.match(parent):
            return None
        dev = pci_sysfs.read_device(self.sysfs_root, parent)
        if dev is None:
            return None
        return self.health.reading(parent, dev.path, dev.driver).to_dict()

    def _warn_shared(self, parent, types, deployables):
        """Types of one parent draw on the parent's one capacity (creating an mdev of
        one lowers the others' available_instances), but each is offered to
        Placement on its own: Placement may promise more than the parent has."""
        totals = ', '.join(f'{t} {d.num_accelerators}'
                           for t, d in zip(types, deployables))
        self._problem(('shared', parent), logging.WARNING,
                      'mdev: parent %s offers several types from one shared capacity '
                      '(%s): Placement sees them as independent, so it can hand out '
                      'more than the parent can create; give the entries max_instances '
                      'that fit together (doc/drivers/mdev.md, "Several types on one '
                      'parent")', parent, totals)

    def _deployable(self, parent, entry, info):
        total = capacity(info, entry.max_instances)
        attributes = [objects.DriverAttribute(
            'rc', entry.resource_class or default_resource_class(entry.mdev_type))]
        attributes += [objects.DriverAttribute(f'trait{i}', t)
                       for i, t in enumerate(entry.traits)]
        return objects.DriverDeployable(
            name=f'{self.host}_mdev_{parent}_{entry.mdev_type}', num_accelerators=total,
            attribute_list=attributes,
            attach_handle_list=attach_handles(entry.mdev_type, parent, total,
                                              entry.live_migratable),
            driver_name=self.name)

    def _pci_device(self, parent):
        """The PCI ids of a PCI parent (kept: they cannot change while it exists)."""
        found = self._pci_ids.get(parent)
        if found is None and pci_sysfs.BDF_RE.match(parent):
            try:
                found = pci_sysfs.read_device(self.sysfs_root, parent)
            except OSError:
                found = None
            if found is not None:
                self._pci_ids[parent] = found
        return found

"""The generic PCI driver: whole PCI functions picked by ``[pci] device_spec``.

Each matching function (a VF counts as its own device) is one device with one
deployable of one accelerator and one ``PCI`` attach handle whose attach_info
carries the address and the entry's ``managed`` tag (spec 4): Nova turns it into
``<hostdev managed='yes|no'>``; and ``live_migratable: true`` when the entry's
``live_migratable`` tag says so (issue 32, API 2.7: how the device may move).

An entry tagged ``pool: true`` offers its functions as pools (issue 52): the
functions it matches on one NUMA node, with one resource class and one set of
traits, are interchangeable, and are one resource provider in Placement whose
total is their number, so a request for eight of them is one numbered group on
one provider instead of eight groups of one (Placement's combinatorial
explosion). Each function stays a device of its own (state, cleanup, health,
history); the deployable carries the pool's name in its ``pool`` attribute and
the conductor makes one provider of the deployables that share it
(steward/conductor/report/providers.py). Pools never span NUMA nodes, so a group
of N units from one pool is NUMA-local by construction. Without the tag (the
default until existing clouds can be reshaped onto pools) each function is its
own provider, as before; an operator keeps it that way where per-device traits
matter.

Entries are read once, when the driver is built at agent start. An invalid entry is
logged at ERROR with the entry and the offending value and is skipped: treating it
as ``managed: true`` would let libvirt rebind a device bound to a VFIO variant
driver, which is what ``managed: false`` exists to prevent. For the same reason,
when only an entry's tags are bad (its matching keys parse), the devices it matches
are withheld rather than left to a later, broader entry with another ``managed``.
"""
import dataclasses
import functools
import json
import logging

import os_resource_classes as orc
import os_traits

from steward.common import exception
from steward.common import moves
from steward.drivers import base
from steward.drivers import objects
from steward.drivers import pools
from steward.drivers.pci import device_spec
from steward.drivers.pci import health as pci_health
from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

OPTION = '[pci] device_spec'
#: Keys this driver reads; the matcher's keys plus its own tags.
KNOWN_KEYS = frozenset(device_spec.MATCH_KEYS + ('managed', 'live_migratable', 'pool',
                                                  'resource_class', 'traits'))
_CUSTOM = 'CUSTOM_'
_MAX_NAME = 255             # Placement's limit for resource class and trait names


@dataclasses.dataclass(frozen=True)
class PciEntry:
    """One device_spec entry with its tags resolved, or the reason they are bad."""
    spec: device_spec.DeviceSpec
    managed: bool | None = None
    live_migratable: bool = False
    resource_class: str | None = None   # None: CUSTOM_PCI_<VENDOR>_<PRODUCT>
    traits: tuple = ()
    pool: bool = False                  # its functions offered as pools (issue 52)
    error: str | None = None            # set: the devices it matches are withheld


def parse_managed(fields):
    """The ``managed`` tag as a bool (pci_sysfs.managed_flag); ValueError if it is
    none of the accepted forms."""
    managed = pci_sysfs.managed_flag(fields)
    if managed is None:
        raise ValueError(f'managed {json.dumps(fields["managed"])} is not a boolean; use '
                         f'true or false (or one of the strings yes/no, on/off, 1/0)')
    return managed


def parse_live_migratable(fields):
    """The ``live_migratable`` tag (issue 32) exactly as Nova 34 reads its own in
    ``[pci] device_spec`` (nova/pci/devspec.py ``_normalize_device_spec_tag``):
    absent or null is false; otherwise oslo.utils' strict conversion of the value
    (a JSON boolean, or its text: true/false, yes/no, on/off, y/n, t/f, 1/0 in
    any case); ValueError for anything else. The mdev driver reads its entries'
    tag the same way."""
    return pools.bool_tag(fields, 'live_migratable')


def parse_pool(fields):
    """The ``pool`` tag (issue 52), read as ``live_migratable`` is."""
    return pools.pool_tag(fields)


def _custom_name(value, what, normalize):
    """Nova's normalisation: upper case, non-alphanumerics to ``_``, one CUSTOM_."""
    name = value.strip().upper()
    if name.startswith(_CUSTOM):
        # os_resource_classes/os_traits.normalize_name always prefix: without this
        # CUSTOM_FOO would become CUSTOM_CUSTOM_FOO.
        name = name[len(_CUSTOM):]
    norm = normalize(name)
    if not norm[len(_CUSTOM):].strip('_'):
        raise ValueError(f'{what} {json.dumps(value)} has no letters or digits')
    if len(norm) > _MAX_NAME:
        raise ValueError(f'{what} {json.dumps(value)} is longer than {_MAX_NAME} '
                         f'characters')
    return norm


def parse_resource_class(fields):
    """The ``resource_class`` override: a standard name as is, else CUSTOM_*."""
    if 'resource_class' not in fields:
        return None
    value = fields['resource_class']
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'resource_class {json.dumps(value)} must be a non-empty string')
    if value.strip().upper() in orc.STANDARDS:
        return value.strip().upper()
    return _custom_name(value, 'resource_class', orc.normalize_name)


@functools.cache
def _standard_traits():
    return frozenset(os_traits.get_traits())


def parse_traits(fields):
    """``traits``: a JSON list of names, or Nova's comma-separated string.

    Standard os-traits names are kept (as Nova does); others become CUSTOM_*.
    """
    value = fields.get('traits')
    if value is None and 'traits' not in fields:
        return ()
    if isinstance(value, str):
        items = value.split(',')
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError(f'traits {json.dumps(value)} must be a list of names or a '
                         f'comma-separated string')
    result = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f'traits item {json.dumps(item)} must be a non-empty string')
        name = item.strip()
        if name.upper() in _standard_traits():
            name = name.upper()
        else:
            name = _custom_name(name, 'traits item', os_traits.normalize_name)
        if name not in result:
            result.append(name)
    return tuple(result)


def resolve_tags(spec):
    """A parsed spec -> PciEntry; InvalidConfiguration quoting the entry."""
    try:
        return PciEntry(spec=spec, managed=parse_managed(spec.fields),
                        live_migratable=parse_live_migratable(spec.fields),
                        resource_class=parse_resource_class(spec.fields),
                        traits=parse_traits(spec.fields), pool=parse_pool(spec.fields))
    except ValueError as err:
        raise exception.InvalidConfiguration(
            reason=f'{OPTION} entry {spec.raw!r}: {err}')


def load_entries(values):
    """Every entry in configured order; invalid ones logged at ERROR and skipped.

    An entry whose matching keys are fine but whose tags are not is kept as a
    withholding entry (``error`` set), so its devices are not reported at all.
    """
    entries = []
    for raw in values or []:
        try:
            spec = device_spec.parse(raw, option=OPTION)
        except exception.InvalidConfiguration as err:
            LOG.error('%s; this entry is skipped (%s)', err, err.code)
            continue
        try:
            entry = resolve_tags(spec)
        except exception.InvalidConfiguration as err:
            LOG.error('%s; this entry is skipped and the devices it matches are not '
                      'reported, not even by a later entry (%s)', err, err.code)
            entries.append(PciEntry(spec=spec, error=str(err)))
            continue
        unknown = sorted(set(spec.fields) - KNOWN_KEYS)
        if unknown:
            LOG.warning('%s entry %r: keys %s are ignored by the pci driver', OPTION,
                        raw, unknown)
        entries.append(entry)
    return entries


def default_resource_class(device):
    """Nova's PCI-in-Placement name: CUSTOM_PCI_<VENDOR>_<PRODUCT>, upper-case hex."""
    return f'CUSTOM_PCI_{device.vendor_id.upper()}_{device.product_id.upper()}'


def pool_name(host, entry, resource_class, numa_node):
    """The provider name of the pool a function of ``entry`` joins
    (steward/drivers/pools.py): the entry's matching keys and traits, not its
    text, so re-spelling it or changing a tag such as ``managed`` keeps its pools
    (a new name would move them)."""
    matching = {k: v for k, v in entry.spec.fields.items() if k in device_spec.MATCH_KEYS}
    return pools.pool_name(host, resource_class, numa_node,
                           [matching, sorted(entry.traits)])


def attach_info(address, entry, numa_node=None):
    """A PCI handle's attach_info: the address, ``managed``, ``numa_node`` where
    the kernel gives one (issue 52, API 2.9), and ``live_migratable`` only when
    true (absent means false, as on handles discovered before the tag existed:
    steward.common.moves)."""
    info = dict(address, managed=entry.managed)
    if numa_node is not None:
        info['numa_node'] = numa_node
    if entry.live_migratable:
        info[moves.LIVE_KEY] = True
    return info


class PciDriver(base.Driver):
    name = 'pci'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.sysfs_root = conf.sysfs_root
        self.entries = load_entries(conf.pci.device_spec)
        self._logged = set()        # (reason, address): say it once, not every cycle
        self.health = pci_health.Watch(conf)

    def init_host(self, context=None):
        valid = [e for e in self.entries if e.error is None]
        if not valid:
            LOG.warning('pci driver enabled but %s has no valid entry: no device is '
                        'reported', OPTION)
        for entry in valid:
            LOG.info('pci driver: entry %s -> managed=%s live_migratable=%s',
                     entry.spec.raw, entry.managed, entry.live_migratable)

    def discover(self):
        found = []
        if not self.entries:
            return found
        present = pci_sysfs.list_devices(self.sysfs_root)
        for dev in present:
            entry = next((e for e in self.entries
                          if e.spec.matches(dev, self.sysfs_root)), None)
            if entry is None:
                continue
            if entry.error is not None:
                self._once('invalid', dev.address, logging.WARNING,
                           'pci: %s is not reported: its first matching entry is invalid '
                           '(%s)', dev.address, entry.error)
                continue
            if dev.has_vfs:
                # Its VFs are enabled: handing out the PF would take them all away.
                self._once('pf', dev.address, logging.INFO,
                           'pci: %s has %d VFs enabled; the PF itself is not reported',
                           dev.address, len(dev.virtfns))
                continue
            found.append(self._device(dev, entry))
        self.health.forget(str(d.address) for d in present)
        return found

    def _once(self, reason, address, level, msg, *args):
        if (reason, address) not in self._logged:
            self._logged.add((reason, address))
            LOG.log(level, msg, *args)

    def _device(self, dev, entry):
        address = dev.address.info()
        rc = entry.resource_class or default_resource_class(dev)
        attributes = [objects.DriverAttribute('rc', rc)]
        attributes += [objects.DriverAttribute(f'trait{i}', t)
                       for i, t in enumerate(entry.traits)]
        if entry.pool:
            attributes.append(objects.DriverAttribute(
                objects.POOL_KEY, pool_name(self.host, entry, rc, dev.numa_node)))
        handle = objects.DriverAttachHandle(
            attach_type='PCI',
            attach_info=json.dumps(attach_info(address, entry, dev.numa_node),
                                   sort_keys=True))
        deployable = objects.DriverDeployable(
            name=f'{self.host}_{dev.address}', num_accelerators=1,
            attribute_list=attributes, attach_handle_list=[handle], driver_name=self.name)
        return objects.DriverDevice(
            vendor=dev.vendor_id, model=dev.product_id, type='PCI',
            controlpath_id=objects.DriverControlPathID(
                'PCI', objects.pci_info(**address)),
            deployable_list=[deployable],
            std_board_info=json.dumps(dev.board_info(), sort_keys=True),
            driver_name=self.name,
            health=self.health.reading(str(dev.address), dev.path, dev.driver).to_dict())

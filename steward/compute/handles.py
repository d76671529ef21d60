"""Reading a bound ARQ's attach handle (``attach_handle_type``/``_uuid``/``_info``).

Cyborg writes PCI address fields as hex strings without ``0x``
(``{"domain": "0000", "bus": "0c", "device": "00", "function": "0"}``), not always
zero-padded (spec 5's example has ``"device": "1"``); ``0x`` prefixes are accepted
too. Anything outside the PCI ranges is refused: libvirt would refuse it later
with a far less helpful message.
"""
import dataclasses

from oslo_utils import strutils
from oslo_utils import uuidutils

from steward.compute import errors

PCI = 'PCI'
MDEV = 'MDEV'
SUPPORTED = (PCI, MDEV)
_LIMITS = (('domain', 'domain', 0xffff), ('bus', 'bus', 0xff), ('device', 'slot', 0x1f),
           ('function', 'function', 0x7))


@dataclasses.dataclass(frozen=True)
class PciAddress:
    domain: int
    bus: int
    slot: int
    function: int

    def __str__(self):
        return f'{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}'

    def libvirt_attrs(self):
        """The attributes of libvirt's ``<address>`` for a PCI source."""
        return {'domain': f'0x{self.domain:04x}', 'bus': f'0x{self.bus:02x}',
                'slot': f'0x{self.slot:02x}', 'function': f'0x{self.function:x}'}

    @property
    def nodedev_name(self):
        """libvirt's node-device name of this function, e.g. pci_0000_0a_00_0."""
        return 'pci_' + str(self).replace(':', '_').replace('.', '_')


def arq_uuid(arq):
    return arq.get('uuid', '?')


def pci_address(arq):
    info = arq.get('attach_handle_info') or {}
    values = []
    for key, _, limit in _LIMITS:
        raw = info.get(key)
        try:
            text = str(raw).strip().lower()
            value = int(text[2:] if text.startswith('0x') else text, 16)
        except (TypeError, ValueError):
            raise errors.AttachHandleInvalid(
                arq=arq_uuid(arq), reason=f'{key} {raw!r} is not a hex number') from None
        if raw is None or isinstance(raw, bool) or not 0 <= value <= limit:
            raise errors.AttachHandleInvalid(
                arq=arq_uuid(arq), reason=f'{key} {raw!r} is outside 0..{limit:#x}')
        values.append(value)
    return PciAddress(*values)


def managed(arq):
    """attach_handle_info.managed (spec 4): absent -> True; JSON booleans; strings
    and 0/1 through oslo.utils' strict conversion (yes/no, true/false, on/off...).
    Anything else is refused rather than guessed: managed='yes' on a device bound
    to a VFIO variant driver makes libvirt rebind it."""
    info = arq.get('attach_handle_info') or {}
    if 'managed' not in info:
        return True
    value = info['managed']
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)):
        try:
            return strutils.bool_from_string(value, strict=True)
        except ValueError:
            pass
    raise errors.AttachHandleInvalid(arq=arq_uuid(arq),
                                     reason=f'managed {value!r} is not a boolean')


@dataclasses.dataclass(frozen=True)
class MdevHandle:
    uuid: str             # the mdev's UUID = attach_handle_uuid
    mdev_type: str        # asked_type, the mdev_supported_types/<type> name
    parent: str           # sysfs name under class/mdev_bus: a BDF or e.g. "mtty"
    pci: PciAddress | None

    @property
    def nodedev_parent(self):
        """libvirt's node-device name of the parent."""
        if self.pci is not None:
            return self.pci.nodedev_name
        # Non-PCI parents (the mtty/mdpy samples' virtual devices): libvirt's udev
        # backend names them after the sysfs name, non-alphanumerics as '_'.
        return ''.join(c if c.isalnum() else '_' for c in self.parent)


def mdev(arq):
    """The mdev an MDEV ARQ asks for. The parent is the PCI function of the
    address fields; a parent that is not a PCI function (the mtty/mdpy samples'
    virtual devices) comes, as the mdev driver writes it, with ``domain``, ``bus``
    and ``function`` empty and its name under class/mdev_bus in ``device``."""
    info = arq.get('attach_handle_info') or {}
    uuid = arq.get('attach_handle_uuid')
    if not uuidutils.is_uuid_like(uuid):
        raise errors.AttachHandleInvalid(arq=arq_uuid(arq),
                                         reason=f'attach_handle_uuid {uuid!r} is not a UUID')
    mdev_type = info.get('asked_type')
    if not isinstance(mdev_type, str) or not mdev_type.strip() or '/' in mdev_type:
        raise errors.AttachHandleInvalid(arq=arq_uuid(arq),
                                         reason=f'asked_type {mdev_type!r} is not an mdev type')
    uuid, mdev_type = str(uuid).lower(), mdev_type.strip()
    if not any(info.get(k) for k in ('domain', 'bus', 'function')):
        parent = info.get('device')
        if not isinstance(parent, str) or not parent.strip() or '/' in parent \
                or parent.strip() in ('.', '..'):
            raise errors.AttachHandleInvalid(
                arq=arq_uuid(arq), reason=f'no PCI address and device {parent!r} is not '
                                          f'a parent device name')
        return MdevHandle(uuid=uuid, mdev_type=mdev_type, parent=parent.strip(), pci=None)
    pci = pci_address(arq)
    return MdevHandle(uuid=uuid, mdev_type=mdev_type, parent=str(pci), pci=pci)


def split_by_type(arqs):
    """({'PCI': [...], 'MDEV': [...]}, set of unsupported attach_handle_types)."""
    out = {t: [] for t in SUPPORTED}
    unsupported = set()
    for arq in arqs:
        kind = arq.get('attach_handle_type')
        if kind in out:
            out[kind].append(arq)
        else:
            unsupported.add(kind or '(none)')
    return out, unsupported

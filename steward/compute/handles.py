"""Reading a bound ARQ's attach handle (``attach_handle_type``/``_uuid``/``_info``).

The PCI fields of attach_handle_info (address, ``managed``) are parsed by
steward.drivers.pci.sysfs, next to the code that writes them, so that every form a
Cyborg driver writes is read back; what it refuses becomes AttachHandleInvalid.
"""
import dataclasses

from oslo_utils import uuidutils

from steward.common import exception
from steward.drivers.pci import sysfs as pci_sysfs

PCI = 'PCI'
MDEV = 'MDEV'
SUPPORTED = (PCI, MDEV)


def arq_uuid(arq):
    return arq.get('uuid', '?')


def pci_address(arq):
    """The pci_sysfs.PciAddress of attach_handle_info."""
    try:
        return pci_sysfs.PciAddress.from_info(arq.get('attach_handle_info') or {})
    except ValueError as err:
        raise exception.AttachHandleInvalid(arq=arq_uuid(arq), reason=str(err)) from None


def managed(arq):
    """attach_handle_info.managed (spec 4), see pci_sysfs.managed_flag."""
    info = arq.get('attach_handle_info') or {}
    flag = pci_sysfs.managed_flag(info)
    if flag is None:
        raise exception.AttachHandleInvalid(
            arq=arq_uuid(arq), reason=f'managed {info["managed"]!r} is not a boolean')
    return flag


def nodedev_name(address):
    """libvirt's node-device name of a PCI function, e.g. pci_0000_0a_00_0."""
    return 'pci_' + str(address).replace(':', '_').replace('.', '_')


@dataclasses.dataclass(frozen=True)
class MdevHandle:
    uuid: str             # the mdev's UUID = attach_handle_uuid
    mdev_type: str        # asked_type, the mdev_supported_types/<type> name
    parent: str           # sysfs name under class/mdev_bus: a BDF or e.g. "mtty"
    pci: pci_sysfs.PciAddress | None

    @property
    def nodedev_parent(self):
        """libvirt's node-device name of the parent."""
        if self.pci is not None:
            return nodedev_name(self.pci)
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
        raise exception.AttachHandleInvalid(
            arq=arq_uuid(arq), reason=f'attach_handle_uuid {uuid!r} is not a UUID')
    mdev_type = info.get('asked_type')
    if not isinstance(mdev_type, str) or not mdev_type.strip() or '/' in mdev_type:
        raise exception.AttachHandleInvalid(
            arq=arq_uuid(arq), reason=f'asked_type {mdev_type!r} is not an mdev type')
    uuid, mdev_type = str(uuid).lower(), mdev_type.strip()
    if not any(info.get(k) for k in ('domain', 'bus', 'function')):
        parent = info.get('device')
        if not isinstance(parent, str) or not parent.strip() or '/' in parent \
                or parent.strip() in ('.', '..'):
            raise exception.AttachHandleInvalid(
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

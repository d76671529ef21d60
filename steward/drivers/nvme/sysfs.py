"""PCI address -> NVMe controller and its namespaces, read from sysfs
(``<sysfs_root>/bus/pci/devices/<bdf>/nvme/nvmeN``) and mapped onto ``<dev_root>``.

With native multipath a controller's namespace entries are hidden per-path nodes
(``nvme1c2n1``) while the block device users open is the subsystem's head
(``nvme1n1``): the name is mapped through that rule, never by string prefix.
"""
import dataclasses
import os
import re

from steward.drivers.pci import sysfs as pci_sysfs

_NS_RE = re.compile(r'^nvme(\d+)(?:c\d+)?n(\d+)$')


@dataclasses.dataclass(frozen=True)
class NamespaceRef:
    nsid: int
    name: str           # block device name, e.g. nvme0n1
    path: str           # <dev_root>/nvme0n1
    sysfs: str | None   # its sysfs directory, when there is one


@dataclasses.dataclass(frozen=True)
class ControllerRef:
    address: str        # PCI BDF
    name: str           # nvme0
    char_path: str      # <dev_root>/nvme0
    sysfs: str          # .../<bdf>/nvme/nvme0
    dev_root: str

    def namespaces(self):
        """Namespaces the host sees on this controller, by nsid."""
        found = {}
        try:
            entries = sorted(os.listdir(self.sysfs))
        except OSError:
            entries = []
        for entry in entries:
            m = _NS_RE.match(entry)
            if not m:
                continue
            path = os.path.join(self.sysfs, entry)
            nsid = pci_sysfs.read_attr(path, 'nsid')
            nsid = int(nsid) if nsid and nsid.isdigit() else int(m.group(2))
            name = f'nvme{m.group(1)}n{m.group(2)}'
            found[nsid] = NamespaceRef(nsid, name, os.path.join(self.dev_root, name), path)
        return [found[k] for k in sorted(found)]

    def holders(self, ns):
        """Kernel holders of a namespace (device-mapper, md...): it is in use."""
        if ns.sysfs is None:
            return []
        try:
            return sorted(os.listdir(os.path.join(ns.sysfs, 'holders')))
        except OSError:
            return []


def controller_for(sysfs_root, dev_root, address):
    """The ControllerRef of the NVMe controller at PCI ``address``, or None when
    the function is not bound to the host nvme driver (e.g. passed to a guest)."""
    base = os.path.join(pci_sysfs.devices_dir(sysfs_root), address, 'nvme')
    try:
        names = sorted(n for n in os.listdir(base) if re.fullmatch(r'nvme\d+', n))
    except OSError:
        return None
    if not names:
        return None
    name = names[0]
    return ControllerRef(address=address, name=name,
                         char_path=os.path.join(dev_root, name),
                         sysfs=os.path.join(base, name), dev_root=dev_root)


def is_nvme_class(class_code):
    """PCI class 0x0108xx: Non-Volatile memory controller."""
    return (class_code or '').lower().startswith('0108')


def mounted_devices():
    """Real paths of the block devices in this host's mount table."""
    out = set()
    try:
        with open('/proc/self/mounts') as f:
            for line in f:
                src = line.split(' ', 1)[0]
                if src.startswith('/dev/'):
                    out.add(os.path.realpath(src))
    except OSError:
        pass
    return out

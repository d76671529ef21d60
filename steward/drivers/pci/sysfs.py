"""Reading PCI devices from sysfs (``<sysfs_root>/bus/pci/devices``), no lspci.

Every reader takes the sysfs root so tests and dry runs point it at a tree in the
kernel's layout. Values are returned without the trailing newline sysfs adds.

It also holds the forms a PCI function takes in what drivers report and the
compute side reads back, so that both ends agree: the address fields of
attach_info/cpid_info (``PciAddress.info``/``from_info``), the ``managed`` tag
(``managed_flag``) and a whole function's std_board_info (``PciDevice.board_info``).
"""
import dataclasses
import os
import re

from oslo_utils import strutils

BDF_RE = re.compile(r'^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$')
# attach_info field, hex digits of its canonical form, largest value.
_INFO_FIELDS = (('domain', 4, 0xffff), ('bus', 2, 0xff), ('device', 2, 0x1f),
                ('function', 1, 0x7))


@dataclasses.dataclass(frozen=True)
class PciAddress:
    domain: str
    bus: str
    slot: str
    function: str

    @classmethod
    def parse(cls, bdf):
        m = BDF_RE.match(bdf.strip())
        if not m:
            raise ValueError(f'not a PCI address: {bdf!r}')
        return cls(*(g.lower() for g in m.groups()))

    def __str__(self):
        return f'{self.domain}:{self.bus}:{self.slot}.{self.function}'

    def info(self):
        """The attach_info / cpid_info fields Cyborg uses (hex strings, no 0x)."""
        return {'domain': self.domain, 'bus': self.bus, 'device': self.slot,
                'function': self.function}

    @classmethod
    def from_info(cls, info):
        """The inverse of ``info``, for fields written by any Cyborg driver: not
        always zero-padded (spec 5's example has ``"device": "1"``), ``0x``
        accepted. Anything outside the PCI ranges is a ValueError naming the
        field: libvirt would refuse it later with a far less helpful message."""
        values = []
        for key, width, limit in _INFO_FIELDS:
            raw = info.get(key)
            try:
                text = str(raw).strip().lower()
                value = int(text[2:] if text.startswith('0x') else text, 16)
            except (TypeError, ValueError):
                raise ValueError(f'{key} {raw!r} is not a hex number') from None
            if raw is None or isinstance(raw, bool) or not 0 <= value <= limit:
                raise ValueError(f'{key} {raw!r} is outside 0..{limit:#x}')
            values.append(f'{value:0{width}x}')
        return cls(*values)


def managed_flag(fields):
    """The ``managed`` tag (spec 4) of a ``[pci] device_spec`` entry or a PCI
    attach_info: absent means libvirt-managed (Nova's default); JSON booleans;
    strings and the integers 0/1 through oslo.utils' strict conversion (yes/no,
    on/off, true/false, y/n, t/f, any case), as Nova accepts them. None for any
    other value, which callers refuse rather than guess: managed='yes' on a device
    bound to a VFIO variant driver makes libvirt rebind it."""
    if 'managed' not in fields:
        return True
    value = fields['managed']
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)):
        try:
            return strutils.bool_from_string(value, strict=True)
        except ValueError:
            pass
    return None


@dataclasses.dataclass
class PciDevice:
    address: PciAddress
    vendor_id: str          # 4 hex digits, lower case, no 0x
    product_id: str
    class_code: str         # 6 hex digits
    driver: str | None
    physfn: PciAddress | None    # set on a VF
    virtfns: list           # VF addresses of a PF
    path: str
    # The NUMA node the kernel places the function on (``numa_node``); None where
    # it says -1 (no NUMA, or firmware that does not tell) or has no such file.
    numa_node: int | None = None

    @property
    def is_vf(self):
        return self.physfn is not None

    @property
    def has_vfs(self):
        return bool(self.virtfns)

    def board_info(self):
        """std_board_info of a device that is this whole function."""
        board = {'vendor_id': self.vendor_id, 'product_id': self.product_id,
                 'class': self.class_code, 'address': str(self.address),
                 'driver': self.driver}
        if self.physfn is not None:
            board['physfn'] = str(self.physfn)
        if self.numa_node is not None:
            board['numa_node'] = self.numa_node
        return board


def read_attr(path, name, default=None):
    try:
        with open(os.path.join(path, name)) as f:
            return f.read().strip()
    except OSError:
        return default


def numa_node_of(path):
    """The ``numa_node`` attribute as an int, or None for -1, absent or garbled
    (the kernel writes -1 when the platform gives no affinity)."""
    text = read_attr(path, 'numa_node')
    try:
        node = int(text)
    except (TypeError, ValueError):
        return None
    return node if node >= 0 else None


def _hex(value, width):
    if value is None:
        return None
    value = value.lower()
    value = value[2:] if value.startswith('0x') else value
    return value.zfill(width)


def _link_address(path):
    try:
        return PciAddress.parse(os.path.basename(os.readlink(path)))
    except (OSError, ValueError):
        return None


def devices_dir(sysfs_root):
    return os.path.join(sysfs_root, 'bus', 'pci', 'devices')


def read_device(sysfs_root, bdf):
    path = os.path.join(devices_dir(sysfs_root), bdf)
    address = PciAddress.parse(bdf)
    vendor = _hex(read_attr(path, 'vendor'), 4)
    product = _hex(read_attr(path, 'device'), 4)
    if vendor is None or product is None:
        return None
    driver_link = os.path.join(path, 'driver')
    driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) \
        else None
    virtfns = []
    try:
        names = sorted(n for n in os.listdir(path) if n.startswith('virtfn'))
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n[6:]) if n[6:].isdigit() else 0):
        vf = _link_address(os.path.join(path, name))
        if vf is not None:
            virtfns.append(vf)
    return PciDevice(address=address, vendor_id=vendor, product_id=product,
                     class_code=_hex(read_attr(path, 'class'), 6) or '000000',
                     driver=driver, physfn=_link_address(os.path.join(path, 'physfn')),
                     virtfns=virtfns, path=path, numa_node=numa_node_of(path))


def list_devices(sysfs_root):
    """All PCI devices under the root, sorted by address; unreadable entries skipped."""
    base = devices_dir(sysfs_root)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    result = []
    for name in sorted(names):
        if not BDF_RE.match(name):
            continue
        dev = read_device(sysfs_root, name)
        if dev is not None:
            result.append(dev)
    return result

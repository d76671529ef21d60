"""Reading mediated-device parents and their types from ``/sys/class/mdev_bus``.

The one place Steward parses mdev sysfs (spec 2): drivers that offer mdevs hold
their own ``MdevBusManager`` and build their objects from the plain dicts it
returns. Each ``/sys/class/mdev_bus/<parent>`` entry is a symlink to the parent's
device directory; a parent is a PCI function (named by its address) or a virtual
device such as the ``mtty``/``mdpy`` samples (named ``mtty``), so no name is
assumed to be a PCI address.

A type whose mandatory files are missing or malformed is logged and skipped, so one
bad type never hides the others. Problems are logged once while they persist, not
on every discovery cycle.
"""
import logging
import os

from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

DEFAULT_PATH = '/sys/class/mdev_bus/'
TYPES_DIR = 'mdev_supported_types'


def canonical_parent(name):
    """PCI addresses compare case-insensitively (sysfs writes them lower case);
    other parent names are kept as they are."""
    return name.lower() if pci_sysfs.BDF_RE.match(name) else name


def _read(path):
    """A sysfs attribute without its trailing newline, or None when unreadable.

    os.open/os.read rather than open(): a third of the cost, which matters at
    thousands of attributes a cycle; a sysfs attribute fits in one read.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


class ProblemLog:
    """Logs a problem when it appears, not again on every discovery cycle while it
    persists; once it has gone for a whole cycle, its return is logged again."""

    def __init__(self, logger=LOG):
        self._log = logger
        self._reported = set()
        self._current = set()

    def new_cycle(self):
        self._reported &= self._current
        self._current = set()

    def __call__(self, key, level, msg, *args):
        self._current.add(key)
        if key not in self._reported:
            self._reported.add(key)
            self._log.log(level, msg, *args)


class MdevBusManager:
    def __init__(self, sysfs_path=DEFAULT_PATH):
        self._path = sysfs_path
        self._problem = ProblemLog()
        # type dir -> ((inode, ctime), name, device_api, description). The kernel
        # fixes these when it registers a type; a type registered again (module
        # reload) is a new kernfs node, with a new inode and ctime, so the cache
        # cannot serve a stale value.
        self._static = {}

    def discover_parent_devices(self, pci_filter=None):
        """Names of the mdev-capable parents, sorted.

        ``pci_filter``: None or empty -> nothing (only configured devices are
        managed); a list holding ``'*'`` -> every parent; otherwise the listed
        names (PCI addresses match whatever their case) that exist.
        """
        self._problem.new_cycle()       # a discovery cycle starts here
        if not pci_filter:
            return []
        try:
            names = os.listdir(self._path)
        except FileNotFoundError:
            self._problem(('no-bus',), logging.INFO,
                          '%s does not exist: no mdev-capable device on this host '
                          '(vendor mdev module not loaded?)', self._path)
            return []
        except OSError as err:
            self._problem(('no-bus',), logging.ERROR, 'cannot list %s: %s',
                          self._path, err)
            return []
        wanted = None if '*' in pci_filter else {canonical_parent(p) for p in pci_filter}
        found = []
        for name in sorted(names):
            if wanted is not None and canonical_parent(name) not in wanted:
                continue
            if not os.path.isdir(os.path.join(self._path, name)):
                self._problem(('dangling', name), logging.WARNING,
                              'mdev parent %s: %s does not lead to a device directory; '
                              'skipped', name, os.path.join(self._path, name))
                continue
            found.append(name)
        return found

    def get_mdev_types(self, pci_address, type_filter=None):
        """The types ``pci_address`` (a parent name) offers, as dicts sorted by
        type_name: type_name, name, available_instances (int), device_api,
        description ('' when absent) and created_instances (entries under
        ``devices/``). ``type_filter``: None or empty -> all types."""
        base = os.path.join(self._path, pci_address, TYPES_DIR)
        try:
            type_names = os.listdir(base)
        except OSError as err:
            self._problem(('no-types', pci_address), logging.WARNING,
                          'mdev parent %s: cannot list %s (%s); no type reported',
                          pci_address, base, err.strerror or err)
            return []
        if type_filter:
            wanted = set(type_filter)
            type_names = [t for t in type_names if t in wanted]
        result = []
        for type_name in sorted(type_names):
            info = self._read_type(pci_address, type_name, os.path.join(base, type_name))
            if info is not None:
                result.append(info)
        return result

    # -- helpers ---------------------------------------------------------------------
    def _read_type(self, parent, type_name, path):
        raw = _read(f'{path}/available_instances')
        try:
            available = int(raw)
        except (TypeError, ValueError):
            available = None
        if available is None or available < 0:
            what = 'is missing' if raw is None else f'holds {raw!r}, not a count'
            self._problem(('available', parent, type_name), logging.ERROR,
                          'mdev type %s of %s: available_instances %s; type skipped',
                          type_name, parent, what)
            return None
        static = self._static_attrs(path)
        if static is None:
            self._problem(('device_api', parent, type_name), logging.ERROR,
                          'mdev type %s of %s: device_api is missing or empty; type '
                          'skipped', type_name, parent)
            return None
        name, device_api, description = static
        try:
            created = len(os.listdir(f'{path}/devices'))
        except OSError:
            created = 0
        return {
            'type_name': type_name,
            'name': name,
            'available_instances': available,
            'device_api': device_api,
            'description': description,
            'created_instances': created,
        }

    def _static_attrs(self, path):
        """(name, device_api, description), or None without a device_api."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        node = (st.st_ino, st.st_ctime_ns)
        cached = self._static.get(path)
        if cached is not None and cached[0] == node:
            return cached[1:]
        device_api = _read(f'{path}/device_api')
        if not device_api:
            return None
        attrs = (_read(f'{path}/name') or '', device_api,
                 _read(f'{path}/description') or '')
        self._static[path] = (node,) + attrs
        return attrs

"""Simulated NVMe controllers: the Python side of shim.c.

A Simulation owns a directory holding a sysfs tree in the kernel's layout, a /dev with
the controller and namespace nodes, and the hardware state the LD_PRELOAD shim serves
to the real nvme-cli. Everything the controllers "remember" lives in files under the
state directory, shared with the shim under flock, so any number of nvme-cli processes
(and the detached sanitize erasers they start) see one consistent controller.

A controller's media is its namespaces' backing files plus the free media (capacity no
namespace holds); find_on_media() searches all of it for what a tenant may have left.
"""
import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

from steward.drivers.pci.sysfs import PciAddress
from tests.fixtures import sysfs_tree
from tests.nvme_sim import build

SPROG_SCALE = 65536
LBA_FORMATS = {512: 0, 4096: 1}         # block size -> LBA format index (FLBAS)
SANACT = {1: 'exit-failure', 2: 'block', 3: 'overwrite', 4: 'crypto'}
SSTAT = {0: 'never', 1: 'success', 2: 'in_progress', 3: 'failed', 4: 'success_no_dealloc'}
MAX_NAMESPACES = 128                    # MAX_NS in shim.c
MAX_ROOT_LEN = 1024                     # keeps every path the shim builds under PATH_MAX
CTRL_MAJOR, DISK_MAJOR = 241, 259       # as the shim reports them
SCAN_CHUNK = 16 * 2**20                 # find_on_media reads this much at a time
PRESENCE = {'': 'bound', 'unbound': 'unbound', 'unplugged': 'unplugged'}
PASSTHROUGH_DRIVER = 'vfio-pci'         # who holds the function after unbind()
_INT_FIELDS = {'t', 'pid', 'opcode', 'nsid', 'cdw2', 'cdw3', 'cdw10', 'cdw11', 'cdw12',
               'cdw13', 'cdw14', 'cdw15', 'data_len', 'timeout_ms', 'result', 'injected'}


class SimError(Exception):
    """Misuse of the simulation (bad parameters, unknown namespace, broken state)."""


# ------------------------------------------------------------------ state files

def _read_kv(path):
    values = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip('\n').partition('=')
            if sep:
                values[key] = value
    return values


def _write_kv(path, values):
    tmp = f'{path}.tmp.{os.getpid()}.{threading.get_ident()}'
    with open(tmp, 'w') as f:
        f.writelines(f'{k}={v}\n' for k, v in values.items())
    os.replace(tmp, path)


def _ascii(name, value, limit):
    if not isinstance(value, str) or not value or len(value) > limit \
            or not all(0x20 <= ord(ch) < 0x7f for ch in value):
        raise SimError(f'{name} must be 1..{limit} printable ASCII characters, got {value!r}')
    return value


def _hex4(name, value):
    value = str(value).lower().removeprefix('0x')
    if not re.fullmatch(r'[0-9a-f]{4}', value):
        raise SimError(f'{name} must be 4 hex digits, got {value!r}')
    return value


def _sysfs_rel(address, name):
    return f'devices/pci0000:00/{address}/nvme/{name}'


def _nqn(serial):
    return f'nqn.2024-01.org.steward.nvme-sim:{serial}'


def _attr(directory, name, value):
    Path(directory, name).write_text(f'{value}\n')


def _relink(target, link):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(link)
    os.symlink(target, link)


def _unlink(path):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _rmtree(path):
    if os.path.islink(path):
        _unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _data_regions(fd, size):
    """[(start, end)] of the parts of a file that may hold data (holes skipped)."""
    regions, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:          # only a hole up to the end
                break
            return [(0, size)]                  # no SEEK_DATA on this file system
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        regions.append((start, end))
        pos = end
    return regions


def find_in_file(path, needle, chunk=SCAN_CHUNK):
    """Offsets of every occurrence of `needle` in the file at `path`, overlapping ones
    included. Reads `chunk` bytes at a time (plus len(needle) - 1 of overlap, so a match
    straddling two chunks is found once); holes are skipped unless the needle is all
    zeroes."""
    if not needle:
        raise SimError('find_on_media needs a non-empty needle')
    needle = bytes(needle)
    span = len(needle) - 1
    hits = []
    with open(path, 'rb') as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        if needle.count(0) == len(needle):
            regions = [(0, size)]
        else:
            # a match holds a non-zero byte, so it lies within `span` of a data region
            regions = []
            for start, end in _data_regions(fd, size):
                start, end = max(0, start - span), min(size, end + span)
                if regions and start <= regions[-1][1]:
                    regions[-1] = (regions[-1][0], max(regions[-1][1], end))
                else:
                    regions.append((start, end))
        for start, end in regions:
            for base in range(start, end, chunk):
                stop = min(base + chunk, end)          # matches starting before stop
                window = os.pread(fd, min(stop + span, end) - base, base)
                at = window.find(needle)
                while 0 <= at < stop - base:
                    hits.append(base + at)
                    at = window.find(needle, at + 1)
    return hits


class Controller:
    """One simulated controller (one PCI function, one NVM subsystem)."""

    def __init__(self, sim, name, index, address):
        self.sim = sim
        self.name = name
        self.index = index
        self.address = address
        self.dir = sim.state_dir / name
        self.char_path = os.path.join(sim.dev_root, name)

    def __repr__(self):
        return f'<Controller {self.name} {self.address}>'

    # -- state access (same flock as the shim)

    @contextlib.contextmanager
    def _locked(self):
        with open(self.dir / 'lock', 'r+') as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _state(self):
        return _read_kv(self.dir / 'state')

    def _config(self):
        return _read_kv(self.dir / 'config')

    @contextlib.contextmanager
    def _edit_state(self):
        with self._locked():
            values = self._state()
            yield values
            _write_kv(self.dir / 'state', values)

    def _tool(self, action):
        result = subprocess.run([str(self.sim.tool), action, self.name],
                                env={'NVME_SIM_STATE': str(self.sim.state_dir)},
                                capture_output=True, text=True, check=False)
        if result.returncode:
            raise SimError(f'nvme-sim {action} {self.name}: {result.stderr.strip()}')

    # -- namespaces

    def namespaces(self):
        """Allocated namespaces: nsid, size (bytes), block_size, attached, backing, node."""
        result = []
        for key, value in self._state().items():
            if not key.startswith('ns.'):
                continue
            nsze, flbas, attached = (int(v) for v in value.split())
            nsid = int(key[3:])
            block = 512 if flbas == 0 else 4096
            node = os.path.join(self.sim.dev_root, f'{self.name}n{nsid}')
            result.append({'nsid': nsid, 'size': nsze * block, 'block_size': block,
                           'nsze': nsze, 'attached': bool(attached),
                           'backing': str(self.dir / f'ns{nsid}.img'),
                           'node': node if os.path.lexists(node) else None})
        return sorted(result, key=lambda n: n['nsid'])

    def _namespace(self, nsid):
        for ns in self.namespaces():
            if ns['nsid'] == nsid:
                return ns
        raise SimError(f'{self.name} has no namespace {nsid}')

    def namespace_paths(self):
        """The namespace nodes the host sees now (one per attached namespace)."""
        return [ns['node'] for ns in self.namespaces() if ns['node']]

    def backing_files(self):
        """The files holding every allocated namespace's data, attached or not."""
        return [ns['backing'] for ns in self.namespaces()]

    # -- tenant data

    def write(self, offset, data, nsid=1):
        ns = self._namespace(nsid)
        if offset < 0 or offset + len(data) > ns['size']:
            raise SimError(f'write of {len(data)} bytes at {offset} is outside namespace '
                           f'{nsid} ({ns["size"]} bytes)')
        with self._edit_state() as st:
            fd = os.open(ns['backing'], os.O_WRONLY)
            try:
                os.pwrite(fd, data, offset)
            finally:
                os.close(fd)
            st['gde'] = '0'     # the subsystem now holds user data again

    def read(self, offset, length, nsid=1):
        ns = self._namespace(nsid)
        if offset < 0 or offset + length > ns['size']:
            raise SimError(f'read of {length} bytes at {offset} is outside namespace {nsid}')
        fd = os.open(ns['backing'], os.O_RDONLY)
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)

    # -- the whole media: namespaces and unallocated capacity

    def free_media_path(self):
        """The file holding the capacity no namespace holds (capacity - allocated bytes):
        what deleted namespaces left, most recently freed first."""
        return str(self.dir / 'free.img')

    def free_size(self):
        return os.path.getsize(self.free_media_path())

    def write_free(self, offset, data):
        """Tenant bytes in unallocated capacity (never in a namespace, or in a deleted
        one). Clears the Global Data Erased bit, like write()."""
        with self._edit_state() as st:
            size = self.free_size()
            if offset < 0 or offset + len(data) > size:
                raise SimError(f'write of {len(data)} bytes at {offset} is outside the free '
                               f'media ({size} bytes)')
            fd = os.open(self.free_media_path(), os.O_WRONLY)
            try:
                os.pwrite(fd, data, offset)
            finally:
                os.close(fd)
            st['gde'] = '0'

    def read_free(self, offset, length):
        with self._locked():
            size = self.free_size()
            if offset < 0 or offset + length > size:
                raise SimError(f'read of {length} bytes at {offset} is outside the free '
                               f'media ({size} bytes)')
            fd = os.open(self.free_media_path(), os.O_RDONLY)
            try:
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)

    def media_files(self):
        """Every file holding the controller's media: each allocated namespace's backing
        file (attached or not), by nsid, then the free media."""
        return self.backing_files() + [self.free_media_path()]

    def media_size(self):
        """Bytes of media: allocated namespaces plus free media (TNVMCAP)."""
        with self._locked():
            return sum(os.path.getsize(p) for p in self.media_files())

    def find_on_media(self, needle):
        """[(path, offset)] of every occurrence of the bytes `needle` anywhere on the
        controller's media (media_files() order, then offset). Taken under the
        controller's lock, so namespace management cannot move bytes mid-scan."""
        with self._locked():
            return [(path, at) for path in self.media_files()
                    for at in find_in_file(path, needle)]

    # -- faults

    def inject(self, opcode, status, times=1, queue=None, skip=0):
        """The next `times` commands with this opcode complete with NVMe `status`.

        times=None: every such command until clear_injections(). queue='admin' or 'io'
        restricts the match where opcodes overlap (0x02 Get Log Page / Read, 0x08 Abort /
        Write Zeroes); skip lets that many matching commands through first.
        """
        if queue not in (None, 'admin', 'io'):
            raise SimError(f"queue must be None, 'admin' or 'io', got {queue!r}")
        if not 0 <= opcode <= 0xff or not 0 < status <= 0xffff:
            raise SimError(f'bad opcode/status {opcode!r}/{status!r}')
        if times is not None and times < 1:
            raise SimError('times must be >= 1 or None')
        with self._edit_state() as st:
            entries = [v for k, v in st.items() if k.startswith('inject.')]
            for k in [k for k in st if k.startswith('inject.')]:
                del st[k]
            entries.append(f'{queue or "any"} {opcode:#x} {status:#x} '
                           f'{-1 if times is None else times} {skip}')
            for i, entry in enumerate(entries):
                st[f'inject.{i}'] = entry

    def clear_injections(self):
        with self._edit_state() as st:
            for k in [k for k in st if k.startswith('inject.')]:
                del st[k]

    def inject_sanitize_failure(self):
        """The next sanitize runs its course, erases nothing and ends with SSTAT failed."""
        with self._edit_state() as st:
            st['fail_next'] = '1'

    def inject_sanitize_lie(self, times=1):
        """The next `times` sanitizes run their course and report success (SSTAT 1, Global
        Data Erased) but erase nothing, as lie_sanitize=True does for every sanitize."""
        if times < 1:
            raise SimError('times must be >= 1')
        with self._edit_state() as st:
            st['lie_next'] = str(int(st.get('lie_next') or 0) + times)

    def inject_sanitize_hang(self, progress=0.43):
        """The next sanitize never finishes: SSTAT in progress, SPROG frozen at `progress`."""
        if not 0 <= progress < 1:
            raise SimError('progress must be in [0, 1)')
        with self._edit_state() as st:
            st['hang_next'] = str(int(progress * SPROG_SCALE))

    def release_sanitize_hang(self):
        """Let a hung sanitize go on from where SPROG froze (the stuck firmware recovers)."""
        with self._edit_state() as st:
            if st.get('mode') != 'hang':
                raise SimError(f'{self.name} has no hung sanitize')
            frozen = int(st['sprog']) / SPROG_SCALE
            config = self._config()
            st['mode'] = 'lie' if config.get('lie_sanitize') == '1' else 'run'
            st['done'] = '0'
            duration_ms = int(config['sanitize_ms'])
            st['start_ms'] = str(int(time.time() * 1000 - frozen * duration_ms))
        self._tool('resume')

    def update(self, **changes):
        """Change capabilities or knobs of a live controller (what id-ctrl reports next)."""
        keys = {'ces': 'ces', 'bes': 'bes', 'wzs': 'wzs', 'ns_mgmt': 'ns_mgmt',
                'format_nvm': 'fmt', 'report_estimates': 'estimates',
                'auto_rescan': 'auto_rescan', 'sanicap_extra': 'sanicap_extra',
                'sanitize_seconds': 'sanitize_ms', 'critical_warning': None,
                'remap_freed': 'remap_freed', 'lie_sanitize': 'lie_sanitize',
                'lie_write_zeroes': 'lie_wz', 'lie_format': 'lie_format',
                'dsm': 'dsm', 'verify': 'vrfy', 'version': 'ver', 'lpa': 'lpa',
                'mdts': 'mdts', 'wzsl': 'wzsl', 'dlfeat': 'dlfeat', 'fna': 'fna',
                'format_seconds': 'format_ms'}
        numeric = {'version', 'lpa', 'mdts', 'wzsl', 'dlfeat', 'fna'}
        unknown = set(changes) - set(keys)
        if unknown:
            raise SimError(f'cannot update {sorted(unknown)}; known: {sorted(keys)}')
        with self._locked():
            config = self._config()
            state = self._state()
            for name, value in changes.items():
                if name == 'critical_warning':
                    state['critical_warning'] = str(int(value))
                elif name in ('sanitize_seconds', 'format_seconds'):
                    config[keys[name]] = str(int(float(value) * 1000))
                elif name == 'sanicap_extra':
                    config['sanicap_extra'] = f'{int(value):#x}'
                elif name in numeric:
                    config[keys[name]] = '-1' if value is None else f'{int(value):#x}'
                else:
                    config[keys[name]] = str(int(bool(value)))
            _write_kv(self.dir / 'config', config)
            _write_kv(self.dir / 'state', state)

    # What the drive's firmware measures, served in its SMART / Health Information
    # log page (Get Log Page 02h, NVMe Base 2.0 Figure 207) by shim.c smart_fill().
    HEALTH_FIELDS = {'temperature_k': 'temp_k', 'available_spare': 'avail_spare',
                     'spare_threshold': 'spare_thresh', 'percent_used': 'percent_used',
                     'extra_warning': 'extra_warning', 'media_errors': 'media_errors',
                     'error_log_entries': 'err_log_entries',
                     'warning_temp_minutes': 'warning_temp_min',
                     'critical_temp_minutes': 'critical_temp_min', 'lie': 'lie'}

    def set_health(self, **changes):
        """Change what the SMART log reports from now on (the fields keep their
        values across calls). The controller derives Critical Warning bit 0 from
        available_spare < spare_threshold and bit 1 from temperature_k >= WCTEMP
        (343 K); ``extra_warning`` ORs in any other bit (2 reliability degraded, 3
        read only, 4 volatile backup failed, 5 PMR read only), as does
        ``update(critical_warning=)``. ``lie=True``: the page says a new, healthy
        drive whatever else is set (a firmware that hides its wear)."""
        unknown = set(changes) - set(self.HEALTH_FIELDS)
        if unknown:
            raise SimError(f'cannot set health {sorted(unknown)}; known: '
                           f'{sorted(self.HEALTH_FIELDS)}')
        for name, value in changes.items():
            if name == 'lie':
                continue
            if not isinstance(value, int) or value < 0:
                raise SimError(f'health {name} must be an integer >= 0, not {value!r}')
            if name in ('available_spare', 'spare_threshold', 'extra_warning') and \
                    value > 255:
                raise SimError(f'health {name} is one byte (Figure 207), not {value}')
        with self._locked():
            path = self.dir / 'health'
            current = _read_kv(path) if path.exists() else {}
            for name, value in changes.items():
                current[self.HEALTH_FIELDS[name]] = str(int(value))
            _write_kv(path, current)

    # -- the device coming and going (link drop, driver rebind, device_spec edits)

    @property
    def presence(self):
        """'bound' (to nvme: nodes and sysfs), 'unbound' (held by vfio-pci) or
        'unplugged' (gone from the PCI bus)."""
        return PRESENCE.get(self._state().get('presence', ''), 'bound')

    def unbind(self):
        """The nvme driver lets go of the function and vfio-pci takes it (what libvirt
        does for passthrough): the PCI function stays, its nvme/ subtree, class links,
        subsystem and /dev nodes go. Commands on descriptors still open fail ENODEV."""
        with self._edit_state() as st:
            if st.get('presence', ''):
                raise SimError(f'{self.name} is {self.presence_of(st)}, not bound')
            st['presence'] = 'unbound'
            config = self._config()
            self._unrender_nvme(config)
            self._set_driver(config, PASSTHROUGH_DRIVER)

    def bind(self):
        """Back to the nvme driver: everything unbind() removed is rendered again, the
        namespaces as the state has them now."""
        with self._edit_state() as st:
            if st.get('presence', '') != 'unbound':
                raise SimError(f'{self.name} is {self.presence_of(st)}, not unbound')
            st['presence'] = ''
            config = self._config()
            self._set_driver(config, 'nvme')
            self._render_nvme(config)
        self._probed()

    def unplug(self):
        """The function drops off the bus (surprise removal, link down): its whole
        sysfs directory, the bus and driver links and the /dev nodes go. The drive keeps
        its media, and a sanitize in progress keeps running."""
        with self._edit_state() as st:
            if st.get('presence', '') == 'unplugged':
                raise SimError(f'{self.name} is already unplugged')
            st['presence'] = 'unplugged'
            config = self._config()
            self._unrender_nvme(config)
            self._unrender_pci(config)

    def replug(self, address=None):
        """The function comes back, bound to nvme, at `address` (another BDF) or where it
        was; same serial, model, NQN, namespaces, media and controller name."""
        if address is not None:
            try:
                address = str(PciAddress.parse(address))
            except ValueError as e:
                raise SimError(str(e)) from None
            if any(c.address == address for c in self.sim.controllers if c is not self):
                raise SimError(f'a controller already sits at {address}')
        with self._edit_state() as st:
            if st.get('presence', '') != 'unplugged':
                raise SimError(f'{self.name} is {self.presence_of(st)}, not unplugged')
            config = self._config()
            if address is not None:
                config['address'] = address
                config['sysfs_rel'] = _sysfs_rel(address, self.name)
                _write_kv(self.dir / 'config', config)
            st['presence'] = ''
            self._render_pci(config)
            self._render_nvme(config)
            self.address = config['address']
        self._probed()

    @staticmethod
    def presence_of(state):
        return PRESENCE.get(state.get('presence', ''), 'bound')

    def _probed(self):
        # the kernel's probe: namespace nodes appear, and a sanitize the drive kept
        # running (or must resume) goes on
        self._tool('rescan')
        self._tool('resume')

    # -- sysfs rendering (under the controller lock)

    def _pci_dir(self, config):
        return Path(self.sim.sysfs_root, 'devices', 'pci0000:00', config['address'])

    def _render_pci(self, config):
        sys = Path(self.sim.sysfs_root)
        address, product = config['address'], config['did']
        pci = sysfs_tree.make_pci(sys, address, config['vid'], product, cls='0x010802',
                                  driver='nvme')
        for attr, value in (('subsystem_vendor', config['ssvid']),
                            ('subsystem_device', product), ('revision', '0x00'),
                            ('numa_node', '-1'), ('driver_override', '(null)')):
            _attr(pci, attr, value)
        drv = sys / 'bus' / 'pci' / 'drivers' / 'nvme'
        _relink(os.path.relpath(pci, drv), drv / address)

    def _set_driver(self, config, driver):
        sys = Path(self.sim.sysfs_root)
        address, pci = config['address'], self._pci_dir(config)
        drivers = sys / 'bus' / 'pci' / 'drivers'
        for name in ('nvme', PASSTHROUGH_DRIVER):
            _unlink(drivers / name / address)
        drv = drivers / driver
        drv.mkdir(parents=True, exist_ok=True)
        _relink(os.path.relpath(drv, pci), pci / 'driver')
        _relink(os.path.relpath(pci, drv), drv / address)
        _attr(pci, 'driver_override', '(null)' if driver == 'nvme' else driver)

    def _unrender_pci(self, config):
        sys = Path(self.sim.sysfs_root)
        address = config['address']
        for name in ('nvme', PASSTHROUGH_DRIVER):
            _unlink(sys / 'bus' / 'pci' / 'drivers' / name / address)
        _unlink(sys / 'bus' / 'pci' / 'devices' / address)
        _rmtree(self._pci_dir(config))

    def _render_nvme(self, config):
        sys = Path(self.sim.sysfs_root)
        name, index, address = config['name'], int(config['index']), config['address']
        serial, model, firmware = config['serial'], config['model'], config['firmware']
        ctrl = self._pci_dir(config) / 'nvme' / name
        ctrl.mkdir(parents=True, exist_ok=True)
        nqn = _nqn(serial)
        for attr, value in (('address', address), ('serial', serial.ljust(20)),
                            ('model', model.ljust(40)), ('firmware_rev', firmware.ljust(8)),
                            ('state', 'live'), ('transport', 'pcie'),
                            ('dev', f'{CTRL_MAJOR}:{index}'), ('cntlid', config['cntlid']),
                            ('cntrltype', 'io'), ('subsysnqn', nqn), ('queue_count', 9),
                            ('sqsize', 1023), ('kato', 0), ('numa_node', -1)):
            _attr(ctrl, attr, value)
        classes = sys / 'class' / 'nvme'
        classes.mkdir(parents=True, exist_ok=True)
        _relink(os.path.join('..', '..', '..', address), ctrl / 'device')   # as the kernel
        _relink(os.path.relpath(classes, ctrl), ctrl / 'subsystem')
        _relink(os.path.relpath(ctrl, classes), classes / name)
        subsys = sys / 'devices' / 'virtual' / 'nvme-subsystem' / f'nvme-subsys{index}'
        subsys.mkdir(parents=True, exist_ok=True)
        for attr, value in (('subsysnqn', nqn), ('model', model.ljust(40)),
                            ('serial', serial.ljust(20)), ('firmware_rev', firmware.ljust(8)),
                            ('subsystype', 'nvm'), ('iopolicy', 'numa')):
            _attr(subsys, attr, value)
        _relink(os.path.relpath(ctrl, subsys), subsys / name)
        sub_class = sys / 'class' / 'nvme-subsystem'
        sub_class.mkdir(parents=True, exist_ok=True)
        _relink(os.path.relpath(subsys, sub_class), sub_class / subsys.name)
        _unlink(self.char_path)
        self.sim._add_char_node(self.char_path)

    def _unrender_nvme(self, config):
        sys = Path(self.sim.sysfs_root)
        name, index = config['name'], int(config['index'])
        disk = re.compile(rf'{re.escape(name)}n\d+')
        for directory in (self.sim.dev_root, sys / 'class' / 'block', sys / 'block'):
            with contextlib.suppress(FileNotFoundError):
                for entry in os.listdir(directory):
                    if disk.fullmatch(entry):
                        _unlink(os.path.join(directory, entry))
        _unlink(self.char_path)
        _unlink(sys / 'class' / 'nvme' / name)
        _unlink(sys / 'class' / 'nvme-subsystem' / f'nvme-subsys{index}')
        _rmtree(sys / 'devices' / 'virtual' / 'nvme-subsystem' / f'nvme-subsys{index}')
        _rmtree(self._pci_dir(config) / 'nvme')

    # -- observation

    def sanitize_state(self):
        st = self._state()
        mode = st.get('mode') or None
        sstat = int(st['sstat']) & 7
        scdw10 = int(st['scdw10'], 0)
        sprog = int(st['sprog']) if mode else SPROG_SCALE - 1
        return {'sstat': sstat, 'status': SSTAT.get(sstat, str(sstat)),
                'sprog': sprog, 'progress': 1.0 if not mode else sprog / SPROG_SCALE,
                'in_progress': mode is not None, 'mode': mode,
                'action': SANACT.get(scdw10 & 7) if sstat else None, 'scdw10': scdw10,
                'failure_mode': st.get('failure') or None,
                'global_data_erased': st.get('gde') == '1',
                'eraser_pid': int(st.get('eraser_pid') or 0) or None,
                'eraser_alive': self._eraser_alive()}

    def wait_sanitize(self, timeout=60.0):
        # A failure's bound only: on a machine loaded by other work (a tox run
        # beside a CI run, load 18 on two cores) a sanitize of 0.5 s and its
        # eraser took more than 10 s.
        deadline = time.monotonic() + timeout
        while True:
            state = self.sanitize_state()
            if not state['in_progress']:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f'{self.name}: sanitize still in progress: {state}')
            time.sleep(0.01)

    def commands(self):
        """Every command the shim received for this controller, oldest first."""
        try:
            text = (self.dir / 'commands.log').read_text()
        except FileNotFoundError:
            return []
        result = []
        for line in text.splitlines():
            entry = {}
            for field in line.split():
                key, _, value = field.partition('=')
                if key in _INT_FIELDS:
                    entry[key] = int(value, 0)
                elif key == 'status':
                    entry[key] = -int(value[1:], 0) if value.startswith('-') else int(value, 0)
                else:
                    entry[key] = value
            result.append(entry)
        return result

    def _eraser_alive(self):
        try:
            fd = os.open(self.dir / 'eraser.lock', os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)        # closing drops a lock taken just now
        return False

    def _stop_eraser(self):
        with self._locked():
            if not self._eraser_alive():
                return
            pid = int(self._state().get('eraser_pid') or 0)
            if pid > 0:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


class _NvmeCliRemoval:
    """Returned by Simulation.remove_nvme_cli(): also a context manager that restores."""

    def __init__(self, sim):
        self.sim = sim
        self.path = sim.nvme_cli

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        self.sim.restore_nvme_cli()


class Simulation:
    """A host with simulated NVMe controllers under `root` (see README.md)."""

    def __init__(self, root, nvme_cli=None):
        root = Path(root).resolve()
        if len(str(root)) > MAX_ROOT_LEN:
            raise SimError(f'simulation root path longer than {MAX_ROOT_LEN} characters')
        self.root = root
        self.sysfs_root = str(root / 'sys')
        self.dev_root = str(root / 'dev')
        self.state_dir = root / 'nvme-sim'
        for d in (self.sysfs_root, self.dev_root, self.state_dir, root / 'bin'):
            os.makedirs(d, exist_ok=True)
        artifacts = build.build()
        self.shim, self.tool = artifacts.shim, artifacts.tool
        _write_kv(self.state_dir / 'sim.conf',
                  {'dev_root': os.path.realpath(self.dev_root),
                   'sysfs_root': os.path.realpath(self.sysfs_root)})
        self.env = {'LD_PRELOAD': str(self.shim), 'NVME_SIM_STATE': str(self.state_dir)}
        # STEWARD_TEST_NVME_CLI runs every simulation of a test run over another
        # nvme-cli (another distribution's, tests/unit/nvme_cli_outputs/README.md).
        self.real_nvme_cli = nvme_cli or os.environ.get('STEWARD_TEST_NVME_CLI') or \
            shutil.which('nvme', path=os.pathsep.join([os.environ.get('PATH', ''),
                                                       '/usr/sbin', '/sbin']))
        if not self.real_nvme_cli:
            raise SimError('nvme-cli not found (Debian: apt-get install nvme-cli)')
        self.nvme_cli = str(root / 'bin' / 'nvme')
        self.restore_nvme_cli()
        self.controllers = []
        self.node_kind = None       # 'mknod' or 'file', decided by the first controller

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop erasers still running (a hung sanitize has none)."""
        for ctrl in self.controllers:
            ctrl._stop_eraser()

    # -- nvme-cli

    def remove_nvme_cli(self):
        """Make sim.nvme_cli vanish (the "nvme-cli not installed" fault).

        Configure [nvme] nvme_cli = sim.nvme_cli; after this call it names nothing until
        restore_nvme_cli(). Used as `with sim.remove_nvme_cli():` it is restored on exit.
        """
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.nvme_cli)
        return _NvmeCliRemoval(self)

    def restore_nvme_cli(self):
        _relink(self.real_nvme_cli, self.nvme_cli)

    def environ(self):
        """os.environ plus the simulation's variables, for subprocess env=."""
        return {**os.environ, **self.env}

    def nvme(self, *args, timeout=60):
        """Run sim.nvme_cli under the simulation; returns the CompletedProcess."""
        return subprocess.run([self.nvme_cli, *map(str, args)], env=self.environ(),
                              capture_output=True, text=True, timeout=timeout, check=False)

    # -- controllers

    def controller(self, name):
        for ctrl in self.controllers:
            if ctrl.name == name:
                return ctrl
        raise SimError(f'no controller {name}')

    def add_controller(self, address='0000:0a:00.0', vendor_id='8086', product_id='0a54',
                       serial=None, model='Sim NVMe', firmware='1.0',
                       namespaces=(64 * 2**20,), block_size=512, ces=True, bes=True,
                       wzs=True, ns_mgmt=True, sanitize_seconds=0.5, *,
                       subsystem_vendor_id=None, capacity=None, max_namespaces=32,
                       cntlid=0, format_nvm=True, sanicap_extra=0, report_estimates=True,
                       auto_rescan=True, remap_freed=True, lie_sanitize=False,
                       lie_write_zeroes=False, lie_format=False, version=0x20000,
                       lpa=0x2, mdts=5, wzsl=0, dlfeat=0x9, fna=None, dsm=True,
                       verify=False, preset=None):
        if preset is not None:
            # A preset (tests/nvme_sim/presets.py) is a real model's identify data:
            # it sets every capability (ces ... verify, max_namespaces, the model
            # string unless one is given); the rest (media, timing, lies) is the test's.
            from tests.nvme_sim import presets
            fields = presets.get(preset)
            model = fields.pop('model') if model == 'Sim NVMe' else model
            fields.pop('model', None)
            return self.add_controller(address, vendor_id, product_id, serial, model,
                                       firmware, namespaces, block_size, **{
                                           **fields,
                                           'sanitize_seconds': sanitize_seconds,
                                           'subsystem_vendor_id': subsystem_vendor_id,
                                           'capacity': capacity, 'cntlid': cntlid,
                                           'auto_rescan': auto_rescan,
                                           'remap_freed': remap_freed,
                                           'lie_sanitize': lie_sanitize,
                                           'lie_write_zeroes': lie_write_zeroes,
                                           'lie_format': lie_format})
        index = len(self.controllers)
        name = f'nvme{index}'
        try:
            address = str(PciAddress.parse(address))
        except ValueError as e:
            raise SimError(str(e)) from None
        if any(c.address == address for c in self.controllers):
            raise SimError(f'a controller already sits at {address}')
        vendor_id, product_id = _hex4('vendor_id', vendor_id), _hex4('product_id', product_id)
        ssvid = _hex4('subsystem_vendor_id', subsystem_vendor_id or vendor_id)
        serial = _ascii('serial', serial or f'SIMSN{index + 1:04d}', 20)
        model, firmware = _ascii('model', model, 40), _ascii('firmware', firmware, 8)
        if block_size not in LBA_FORMATS:
            raise SimError(f'block_size must be one of {sorted(LBA_FORMATS)}')
        namespaces = list(namespaces)
        for size in namespaces:
            if not isinstance(size, int) or size <= 0 or size % block_size:
                raise SimError(f'namespace size {size!r} is not a positive multiple of '
                               f'{block_size}')
        if not 1 <= max_namespaces <= MAX_NAMESPACES or len(namespaces) > max_namespaces:
            raise SimError(f'max_namespaces must be 1..{MAX_NAMESPACES} and hold '
                           f'{len(namespaces)} namespaces')
        capacity = sum(namespaces) if capacity is None else capacity
        if capacity < sum(namespaces) or capacity <= 0:
            raise SimError('capacity is smaller than the namespaces')
        if sanitize_seconds < 0:
            raise SimError('sanitize_seconds must be >= 0')
        if not (0 <= version <= 0xffffffff and 0 <= lpa <= 0xff and 0 <= mdts <= 0xff
                and 0 <= wzsl <= 0xff and 0 <= dlfeat <= 0xff
                and (fna is None or 0 <= fna <= 0xff)):
            raise SimError('version/lpa/mdts/wzsl/dlfeat/fna out of range')

        ctrl = Controller(self, name, index, address)
        ctrl.dir.mkdir()
        (ctrl.dir / 'lock').touch()
        config = {
            'name': name, 'index': index, 'address': address, 'vid': f'0x{vendor_id}',
            'did': f'0x{product_id}', 'ssvid': f'0x{ssvid}', 'serial': serial,
            'model': model, 'firmware': firmware, 'cntlid': cntlid, 'capacity': capacity,
            'max_ns': max_namespaces, 'ces': int(ces), 'bes': int(bes), 'wzs': int(wzs),
            'ns_mgmt': int(ns_mgmt), 'fmt': int(format_nvm),
            'estimates': int(report_estimates), 'auto_rescan': int(auto_rescan),
            'sanicap_extra': f'{sanicap_extra:#x}',
            'sanitize_ms': int(sanitize_seconds * 1000),
            'sysfs_rel': _sysfs_rel(address, name), 'remap_freed': int(bool(remap_freed)),
            'lie_sanitize': int(bool(lie_sanitize)), 'lie_wz': int(bool(lie_write_zeroes)),
            'lie_format': int(bool(lie_format)), 'ver': f'{version:#x}',
            'lpa': f'{lpa:#x}', 'mdts': mdts, 'wzsl': wzsl, 'dlfeat': f'{dlfeat:#x}',
            'fna': -1 if fna is None else f'{fna:#x}', 'dsm': int(bool(dsm)),
            'vrfy': int(bool(verify))}
        _write_kv(ctrl.dir / 'config', config)
        state = {'sstat': 0, 'sprog': SPROG_SCALE - 1, 'scdw10': '0x0', 'gde': 1, 'mode': '',
                 'failure': '', 'fail_next': 0, 'hang_next': -1, 'gen': 0, 'done': 0,
                 'total': 0, 'start_ms': 0, 'eraser_pid': 0, 'critical_warning': 0,
                 'lie_next': 0, 'presence': ''}
        for nsid, size in enumerate(namespaces, 1):
            with open(ctrl.dir / f'ns{nsid}.img', 'wb') as f:
                f.truncate(size)
            state[f'ns.{nsid}'] = f'{size // block_size} {LBA_FORMATS[block_size]} 1'
        with open(ctrl.free_media_path(), 'wb') as f:   # sparse: never written yet
            f.truncate(capacity - sum(namespaces))
        _write_kv(ctrl.dir / 'state', state)
        config = {k: str(v) for k, v in config.items()}
        ctrl._render_pci(config)
        ctrl._render_nvme(config)
        self.controllers.append(ctrl)
        ctrl._tool('rescan')       # the kernel's first scan: namespace nodes appear
        return ctrl

    def _add_char_node(self, path):
        # nvme-cli fstat()s the node; a real char node (same numbers as /dev/null) keeps
        # tools outside the shim honest, a plain file works where mknod is not allowed.
        if self.node_kind in (None, 'mknod'):
            try:
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
                self.node_kind = 'mknod'
                return
            except PermissionError:
                if self.node_kind == 'mknod':
                    raise
        Path(path).touch(mode=0o600)
        self.node_kind = 'file'

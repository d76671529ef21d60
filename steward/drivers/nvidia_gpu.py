"""The NVIDIA GPU driver: whole GPUs (``PGPU``) and vGPU types (``VGPU``).

GPUs are the PCI functions under ``<sysfs_root>/bus/pci/devices`` with vendor
0x10de and a display class (0x0300xx VGA compatible, 0x0302xx 3D controller). What
each GPU reports comes from configuration (steward/conf/nvidia.py):

* a vGPU type mapped to it (``[nvidia_gpu] enabled_vgpu_types`` and
  ``[vgpu_<type>] device_addresses``) -> one deployable of resource class ``VGPU``
  with ``available_instances + created_instances`` MDEV handles, trait
  ``CUSTOM_NVIDIA_<DEVICE>_<NAME>`` (``GRID T4-1B`` on a 1eb8 -> ``..._1EB8_T4_1B``);
* no vGPU type -> one deployable of resource class ``PGPU`` with one PCI handle and
  trait ``CUSTOM_NVIDIA_<DEVICE>``.

Everything about mdev types is read by this driver's own ``MdevBusManager``
(spec 2); the attach handles are the generic mdev driver's, so both drivers hand
Nova the same attach_info for the same vGPU. Deployables are named
``<host>_<address>`` as upstream's GPU driver names them, so an upgraded cloud's
resource providers are adopted, not duplicated.

Virtual functions (``physfn`` link) are skipped unless ``include_vfs``; a VF is only
ever reported as a vGPU parent (SR-IOV vGPU puts the types on the VFs), never
whole, and a PF whose VFs are enabled is not reported whole either.

Health (issue 38), without the proprietary stack: the GPU's AER counters and
driver binding (steward/drivers/pci/health.py), and the Xid events the NVIDIA
kernel module logs (``NVRM: Xid (PCI:0000:3b:00): 79, ...``) in the file named
by ``[health] gpu_kernel_log``, read from where the previous discovery stopped
(XidLog). NVML is not used: it needs the driver's libnvidia-ml and reports
what the same Xids say. What this cannot see: a GPU that fails without an Xid or
an AER error (ECC page retirement pending, thermal slowdown: NVML-only), Xids
logged while the agent was not running (it starts at the end of the log), and a
guest's own view of a passed-through GPU.
"""
import json
import logging
import os
import re

import os_traits

from steward.common import health
from steward.conf import nvidia as nvidia_conf
from steward.drivers import base
from steward.drivers import objects
from steward.drivers.mdev import bus as mdev_bus
from steward.drivers.mdev import driver as mdev
from steward.drivers.pci import health as pci_health
from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." The
# address has no function number (GPUs are function 0).
_XID = re.compile(r'NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})'
                  r'(?:\.[0-7])?\): (\d+)(?:,\s*(.*))?')

VENDOR_ID = '10de'
DISPLAY_CLASSES = ('0300', '0302')      # VGA compatible controller, 3D controller
DEVICE_TYPE = 'GPU'
# vGPU type names read "GRID T4-1B" (older drivers) or "NVIDIA A10-4Q".
_BRAND = re.compile(r'^(GRID|NVIDIA)\s+', re.IGNORECASE)


def load_vgpu_mapping(conf):
    """``(by_address, default_type)`` from configuration.

    ``by_address`` maps a GPU address to its vGPU type; ``default_type`` is the one
    enabled type when it lists no addresses (it then applies to every GPU offering
    it). Problems are logged at ERROR and the offending part is left out.
    """
    types = []
    for raw in conf.nvidia_gpu.enabled_vgpu_types:
        name = raw.strip()
        if not name or '/' in name:
            LOG.error('[nvidia_gpu] enabled_vgpu_types: %r is not a vGPU type name; '
                      'ignored (cyb.config.invalid)', raw)
        elif name not in types:
            types.append(name)
    nvidia_conf.register_vgpu_groups(conf)
    by_address, addresses_of = {}, {}
    for type_name in types:
        group = nvidia_conf.vgpu_group(type_name)
        addresses_of[type_name] = []
        for raw in conf[group].device_addresses:
            try:
                address = str(pci_sysfs.PciAddress.parse(raw))
            except ValueError:
                LOG.error('[%s] device_addresses: %r is not a PCI address '
                          '(dddd:bb:ss.f); ignored (cyb.config.invalid)', group, raw)
                continue
            if address in by_address:
                LOG.error('[%s] device_addresses: %s is already mapped to vGPU type %s '
                          '(a GPU carries one type); %s keeps %s (cyb.config.invalid)',
                          group, address, by_address[address], address,
                          by_address[address])
                continue
            by_address[address] = type_name
            addresses_of[type_name].append(address)
    default_type = None
    if len(types) == 1 and not addresses_of[types[0]]:
        default_type = types[0]
    else:
        for type_name in types:
            if not addresses_of[type_name]:
                LOG.error('vGPU type %s has no [%s] device_addresses; with several '
                          'enabled types each needs its GPUs listed; it is not '
                          'reported (cyb.config.invalid)', type_name,
                          nvidia_conf.vgpu_group(type_name))
    return by_address, default_type


def type_trait(product_id, type_info):
    """CUSTOM_NVIDIA_<DEVICE>_<NAME> from the type's ``name`` file, brand dropped."""
    short = _BRAND.sub('', type_info['name']).strip() or type_info['type_name']
    return os_traits.normalize_name(f'NVIDIA_{product_id}_{short}')


def is_gpu(dev):
    return dev.vendor_id == VENDOR_ID and dev.class_code[:4] in DISPLAY_CLASSES


class XidLog:
    """The Xid lines appended to a kernel log file since the last read, by GPU.
    Starts at the end of the file (an Xid from before the agent started may be
    days old); a file that shrank was rotated: read from its start."""

    def __init__(self, path):
        self.path = path
        self._offset = self._size()

    def _size(self):
        try:
            return os.path.getsize(self.path) if self.path else 0
        except OSError:
            return 0

    def new_events(self):
        """{'dddd:bb:dd': [(xid, text), ...]} logged since the previous call."""
        if not self.path:
            return {}
        size = self._size()
        if size < self._offset:
            self._offset = 0
        events = {}
        try:
            with open(self.path, 'rb') as f:
                f.seek(self._offset)
                data = f.read(size - self._offset)
        except OSError as err:
            LOG.warning('nvidia_gpu: [health] gpu_kernel_log %s unreadable: %s',
                        self.path, err)
            return {}
        # A line still being written is read next time.
        end = data.rfind(b'\n') + 1
        self._offset += end
        for line in data[:end].decode('utf-8', 'replace').splitlines():
            m = _XID.search(line)
            if m:
                events.setdefault(m.group(1).lower(), []).append(
                    (m.group(2), (m.group(3) or '').strip()))
        return events


class NvidiaGpuDriver(base.Driver):
    name = 'nvidia_gpu'
    shares_parents = True

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.sysfs_root = conf.sysfs_root
        self.include_vfs = conf.nvidia_gpu.include_vfs
        self._bus_path = os.path.join(conf.sysfs_root, 'class', 'mdev_bus', '')
        self._mdev = mdev_bus.MdevBusManager(self._bus_path)
        self.vgpu_by_address, self.default_vgpu_type = load_vgpu_mapping(conf)
        self._problem = mdev_bus.ProblemLog(LOG)
        self.health = pci_health.Watch(conf)
        self.xids = XidLog(conf.health.gpu_kernel_log)
        self._xid_events = {}

    def init_host(self, context=None):
        for address, type_name in sorted(self.vgpu_by_address.items()):
            LOG.info('nvidia_gpu: %s -> vGPU type %s', address, type_name)
        if self.default_vgpu_type:
            LOG.info('nvidia_gpu: every GPU offering %s reports it',
                     self.default_vgpu_type)

    def discover(self):
        self._problem.new_cycle()
        gpus = []
        for dev in pci_sysfs.list_devices(self.sysfs_root):
            if not is_gpu(dev):
                continue
            if dev.is_vf and not self.include_vfs:
                continue
            gpus.append(dev)
        found = {str(g.address) for g in gpus}
        for address in sorted(set(self.vgpu_by_address) - found):
            self._problem(('absent', address), logging.WARNING,
                          'nvidia_gpu: %s is configured for vGPU type %s but is not an '
                          'NVIDIA GPU on this host%s', address,
                          self.vgpu_by_address[address],
                          '' if self.include_vfs else ' (VFs need include_vfs = true)')
        parents = set(self._mdev.discover_parent_devices(sorted(found)))
        self.health.forget(found)
        self._xid_events = self.xids.new_events()
        devices = []
        for gpu in gpus:
            device = self._device(gpu, parents)
            if device is not None:
                devices.append(device)
        return devices

    def _device(self, gpu, parents):
        address = str(gpu.address)
        explicit = self.vgpu_by_address.get(address)
        type_name = explicit or self.default_vgpu_type
        type_info = None
        if type_name and address in parents:
            offered = self._mdev.get_mdev_types(address, type_filter=[type_name])
            type_info = offered[0] if offered else None
        if type_info is not None:
            return self._gpu(gpu, self._vgpu(gpu, type_info))
        if explicit:
            self._problem(('type', address), logging.WARNING,
                          'nvidia_gpu: %s does not offer vGPU type %s (%s); it is not '
                          'reported', address, explicit,
                          'not an mdev parent: is the vGPU manager loaded?'
                          if address not in parents else 'unknown or unreadable type')
            return None
        if gpu.is_vf:
            self._problem(('vf', address), logging.INFO,
                          'nvidia_gpu: VF %s has no vGPU type; not reported', address)
            return None
        if gpu.has_vfs:
            self._problem(('pf', address), logging.INFO,
                          'nvidia_gpu: %s has %d VFs enabled; not reported as a PGPU',
                          address, len(gpu.virtfns))
            return None
        return self._gpu(gpu, self._pgpu(gpu))

    def _gpu(self, gpu, deployable):
        return objects.DriverDevice(
            vendor=gpu.vendor_id, model=gpu.product_id, type=DEVICE_TYPE,
            controlpath_id=objects.DriverControlPathID(
                'PCI', objects.pci_info(**gpu.address.info())),
            deployable_list=[deployable],
            std_board_info=json.dumps(gpu.board_info(), sort_keys=True),
            driver_name=self.name, health=self._health(gpu))

    def _health(self, gpu):
        """AER, driver binding and the Xids logged since the last discovery."""
        address = str(gpu.address)
        critical = set(self.conf.health.gpu_critical_xids)
        xids = []
        for xid, text in self._xid_events.get(address.rsplit('.', 1)[0], ()):
            severe = xid in critical
            xids.append(health.Condition(
                'gpu.xid_critical' if severe else 'gpu.xid',
                health.HEALTH_UNHEALTHY if severe else health.HEALTH_WARNING,
                f'Xid {xid}' + (f': {text}' if text else '')))
        return self.health.reading(address, gpu.path, gpu.driver, xids).to_dict()

    def _pgpu(self, gpu):
        return objects.DriverDeployable(
            name=f'{self.host}_{gpu.address}', num_accelerators=1,
            attribute_list=[
                objects.DriverAttribute('rc', 'PGPU'),
                objects.DriverAttribute('trait0', os_traits.normalize_name(
                    f'NVIDIA_{gpu.product_id}'))],
            attach_handle_list=[objects.DriverAttachHandle(
                attach_type='PCI', attach_info=objects.pci_info(**gpu.address.info()))],
            driver_name=self.name)

    def _vgpu(self, gpu, type_info):
        total = mdev.capacity(type_info)
        return objects.DriverDeployable(
            name=f'{self.host}_{gpu.address}', num_accelerators=total,
            attribute_list=[
                objects.DriverAttribute('rc', 'VGPU'),
                objects.DriverAttribute('trait0', type_trait(gpu.product_id, type_info))],
            attach_handle_list=mdev.attach_handles(type_info['type_name'],
                                                   str(gpu.address), total),
            driver_name=self.name)

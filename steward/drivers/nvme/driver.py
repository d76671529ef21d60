"""The generic NVMe driver (spec 1): whole controllers from any vendor, cleaned
between tenants with the one action locked in at discovery.

* ``init_host`` refuses to start the agent when nvme-cli cannot be run.
* ``discover`` walks PCI sysfs, keeps the functions ``[nvme] device_spec`` matches
  that are NVMe controllers (class 0x0108 or bound to the nvme driver; never SR-IOV
  VFs: a sanitize erases the whole subsystem, so a VF cannot be cleaned on its
  own), reads ``nvme id-ctrl`` and resolves the cleanup policy (policy.py).
  A device whose policy cannot be met (or is invalid: zero + crypto) is still
  reported, with ``cleanup_action`` null and the reason: the conductor keeps it in
  error, never available.
* ``cleanup`` runs the action stored in the device's std_board_info; there is no
  fallback to another action at run time.

Per device: type NVME, resource class ``CUSTOM_NVME_<VENDOR>_<PRODUCT>``, traits
HW_NVME_CES/BES/WZS for what the controller supports (the conductor adds
OWNER_CYBORG), one deployable named ``<host>_<pci address>`` with one PCI attach
handle.
"""
import json
import logging
import os

from oslo_config import cfg
import os_traits

from steward.common import exception
from steward.conf import health as health_conf
from steward.drivers import base
from steward.drivers import objects
from steward.drivers import pools
from steward.drivers.nvme import caps as nvme_caps
from steward.drivers.nvme import cleanup as nvme_cleanup
from steward.drivers.nvme import cli as nvme_cli
from steward.drivers.nvme import health as nvme_health
from steward.drivers.nvme import policy as nvme_policy
from steward.drivers.nvme import sysfs as nvme_sysfs
from steward.drivers.nvme import versions as nvme_versions
from steward.drivers.pci import device_spec
from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

POLICY_KEYS = ('clear_action', 'clear_strategy', 'lba_size')
# ``pool``: the entry's drives of one NUMA node with one cleanup policy and the
# same capability traits are one resource provider (issue 52, steward/drivers/pools.py).
ALLOWED_KEYS = frozenset(device_spec.MATCH_KEYS) | frozenset(POLICY_KEYS) | {'pool'}
CAPABILITY_TRAITS = (('ces', os_traits.HW_NVME_CES), ('bes', os_traits.HW_NVME_BES),
                     ('wzs', os_traits.HW_NVME_WZS))
DEVICE_TYPE = 'NVME'


def parse_specs(values):
    """[nvme] device_spec -> DeviceSpecs; unknown keys or policy values are a
    configuration error (the agent does not start). zero + crypto is not: the spec
    has it logged and the device excluded at discovery."""
    specs = device_spec.parse_all(values)
    for spec in specs:
        unknown = set(spec.fields) - ALLOWED_KEYS
        if unknown:
            raise exception.InvalidConfiguration(
                reason=f'[nvme] device_spec entry {spec.raw!r}: unknown key(s) '
                       f'{", ".join(sorted(unknown))}; allowed: '
                       f'{", ".join(sorted(ALLOWED_KEYS))}')
        bad = nvme_policy.validate(*nvme_policy.policy_of(spec.fields)) or \
            nvme_policy.validate_lba_size(spec.fields.get('lba_size')) or _bad_pool(spec)
        if bad:
            raise exception.InvalidConfiguration(
                reason=f'[nvme] device_spec entry {spec.raw!r}: {bad}')
    return specs


def _bad_pool(spec):
    try:
        pools.pool_tag(spec.fields)
    except ValueError as err:
        return str(err)
    return None


def resource_class(vendor_id, product_id):
    return f'CUSTOM_NVME_{vendor_id.upper()}_{product_id.upper()}'


def board_info(product_id, address, resolution, clear_action, clear_strategy, caps,
               lba_size=None, lba_size_source=None, identify=None):
    """std_board_info: the spec's product_id and pci_address, the locked-in
    ``cleanup_action`` and, under ``cleanup``, why it was chosen and the LBA size of
    the canonical layout every cleanup leaves behind."""
    return json.dumps({
        'product_id': product_id, 'pci_address': address,
        'cleanup_action': resolution.action,
        'cleanup': {'clear_action': clear_action, 'clear_strategy': clear_strategy,
                    'capabilities': caps, 'reason': resolution.reason,
                    'excluded': resolution.reason if resolution.excluded else None,
                    'lba_size': lba_size, 'lba_size_source': lba_size_source,
                    # what Identify Controller advertised when the action was chosen
                    'identify': identify},
    }, sort_keys=True)


class NvmeDriver(base.Driver):
    name = 'nvme'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        self.specs = parse_specs(conf.nvme.device_spec)
        self.cli = nvme_cli.NvmeCli(conf.nvme.nvme_cli)
        health_conf.register_opts(conf)         # read by nvme_health
        self._identity = {}         # PCI address -> last id-ctrl read (see discover)
        self._lba_size = {}         # PCI address -> LBA size of its first namespace
        self._reported_exclusions = set()

    @property
    def sysfs_root(self):
        return self.conf.sysfs_root

    @property
    def dev_root(self):
        return self.conf.dev_root

    # -- start ---------------------------------------------------------------------
    def init_host(self, context=None):
        try:
            timeout = self.conf.nvme.cleanup_timeout
        except (cfg.ConfigFileValueError, ValueError) as err:
            # The spec's own example writes "cleanup_timeout = 900   # seconds": an
            # inline comment oslo.config keeps as part of the value.
            raise exception.InvalidConfiguration(
                reason=f'[nvme] cleanup_timeout: {err}. A comment must be on its own '
                       f'line (oslo.config keeps "# ..." after a value as part of it)')
        if self.cli.path() is None:
            raise exception.NvmeCliMissing(binary=self.cli.binary)
        try:
            version = self.cli.version()
        except exception.NvmeCommandFailed as err:
            raise exception.InvalidConfiguration(
                reason=f'[nvme] nvme_cli = {self.cli.binary!r} does not run: {err}')
        nvme_versions.check(version, self.cli.binary)
        LOG.info('nvme driver: nvme-cli %s (%s); %d device_spec entr%s; cleanup_timeout '
                 '%s s', version, self.cli.path(), len(self.specs),
                 'y' if len(self.specs) == 1 else 'ies', timeout)

    # -- discovery -----------------------------------------------------------------
    def discover(self):
        found = []
        for pci in pci_sysfs.list_devices(self.sysfs_root):
            spec = device_spec.first_match(self.specs, pci, self.sysfs_root)
            if spec is None:
                continue
            address = str(pci.address)
            ctrl = nvme_sysfs.controller_for(self.sysfs_root, self.dev_root, address)
            if ctrl is None and not nvme_sysfs.is_nvme_class(pci.class_code):
                continue
            if pci.is_vf:
                LOG.warning('nvme: %s is an SR-IOV VF; not managed (a sanitize would '
                            'erase its whole subsystem)', address)
                continue
            found.append(self._device(pci, address, ctrl, spec))
        return found

    def _identify(self, address, ctrl):
        """id-ctrl of the controller, or the last one read while it is bound to
        another driver (passed through to a guest), or None."""
        if ctrl is not None:
            try:
                identity = self.cli.id_ctrl(ctrl.char_path)
                self._identity[address] = identity
                return identity
            except (exception.NvmeCommandFailed, exception.NvmeCliMissing) as err:
                LOG.error('nvme: id-ctrl of %s (%s) failed: %s', address, ctrl.char_path,
                          err)
        return self._identity.get(address)

    def _discovered_lba_size(self, address, ctrl):
        """The block size of the controller's first namespace as the host sees it
        (sysfs, no command), remembered while the device is away in a guest."""
        for ns in (ctrl.namespaces() if ctrl is not None else ()):
            size = pci_sysfs.read_attr(os.path.join(ns.sysfs, 'queue'),
                                       'logical_block_size') if ns.sysfs else None
            if size and size.isdigit():
                self._lba_size[address] = int(size)
                break
        return self._lba_size.get(address)

    def _device(self, pci, address, ctrl, spec):
        identity = self._identify(address, ctrl)
        caps = identity.capabilities() if identity is not None else None
        clear_action, clear_strategy = nvme_policy.policy_of(spec.fields)
        resolution = nvme_policy.resolve(clear_action, clear_strategy, caps)
        key = (address, resolution.reason)
        if resolution.excluded and key not in self._reported_exclusions:
            self._reported_exclusions.add(key)
            # A wrong policy is the operator's error; a controller that lacks what
            # a valid policy needs is a fact about the hardware: one WARNING.
            (LOG.error if resolution.invalid else LOG.warning)(
                'nvme: device %s excluded from the pool: %s', address, resolution.reason)
        elif not resolution.excluded:
            self._reported_exclusions = {k for k in self._reported_exclusions
                                         if k[0] != address}
        attrs = [objects.DriverAttribute('rc', resource_class(pci.vendor_id,
                                                              pci.product_id))]
        for cap, trait in CAPABILITY_TRAITS:
            if caps and caps.get(cap):
                attrs.append(objects.DriverAttribute(f'trait{len(attrs) - 1}', trait))
        if pools.pool_tag(spec.fields):
            # Interchangeable: one entry, one cleanup policy (the one each drive
            # resolved, so a drive that resolved another is another pool), the
            # same traits, one NUMA node. A drive being cleaned is out of its
            # pool (its unit reserved) until the cleanup is verified.
            matching = {k: v for k, v in spec.fields.items()
                        if k in device_spec.MATCH_KEYS}
            attrs.append(objects.DriverAttribute(objects.POOL_KEY, pools.pool_name(
                self.host, attrs[0].value, pci.numa_node,
                [matching, resolution.action, sorted(a.value for a in attrs[1:])])))
        info = objects.pci_info(**pci.address.info())
        deployable = objects.DriverDeployable(
            name=f'{self.host}_{address}', num_accelerators=1, attribute_list=attrs,
            attach_handle_list=[objects.DriverAttachHandle('PCI', info)],
            driver_name=self.name)
        vendor_info = {}
        if identity is not None:
            # serial + subsystem NQN: the identity that survives a new PCI address.
            vendor_info = {'serial': identity.serial, 'model': identity.model,
                           'firmware': identity.firmware, 'subsysnqn': identity.subnqn}
        lba_size, source = spec.fields.get('lba_size'), 'device_spec'
        if lba_size is None:
            lba_size, source = self._discovered_lba_size(address, ctrl), 'discovery'
        lba_size = int(lba_size) if lba_size is not None else None
        return objects.DriverDevice(
            vendor=pci.vendor_id, model=pci.product_id, type=DEVICE_TYPE,
            controlpath_id=objects.DriverControlPathID('PCI', info),
            deployable_list=[deployable],
            std_board_info=board_info(pci.product_id, address, resolution,
                                      clear_action, clear_strategy, caps, lba_size,
                                      source if lba_size is not None else None,
                                      nvme_caps.profile(identity).as_dict()
                                      if identity is not None else None),
            vendor_board_info=json.dumps(vendor_info, sort_keys=True),
            driver_name=self.name, health=self._health(ctrl))

    def _health(self, ctrl):
        """The SMART log's reading, or None while the controller is not the host's
        (passed through to a guest: only the guest can ask it)."""
        if ctrl is None:
            return None
        return nvme_health.read(self.cli, ctrl.char_path, self.conf).to_dict()

    # -- cleanup -------------------------------------------------------------------
    def _controller(self, device):
        board = json.loads(device.get('std_board_info') or '{}')
        address = board.get('pci_address')
        if not address:
            raise exception.CleanupUnsupported(
                device=device['uuid'], reason='std_board_info has no pci_address')
        ctrl = nvme_sysfs.controller_for(self.sysfs_root, self.dev_root, address)
        if ctrl is None:
            raise exception.ControllerMissing(
                device=device['uuid'], address=address,
                reason='no nvme controller under its sysfs node; cleanup needs it bound '
                       'to the host nvme driver (libvirt managed mode rebinds it)')
        return board, ctrl

    def cleanup(self, device, job=None):
        """Run the locked-in action on ``device`` (its stored fields as a dict).
        ``job`` (a CleanupJob) carries cancellation, progress and the erase record."""
        from steward.drivers import cleanup_job
        job = job or cleanup_job.CleanupJob(device['uuid'])
        board = json.loads(device.get('std_board_info') or '{}')
        action = board.get('cleanup_action')
        job.record.update(action=action, pci_address=board.get('pci_address'))
        if not action:
            reason = (board.get('cleanup') or {}).get('reason') or \
                'no cleanup action was locked in at discovery'
            raise exception.CleanupUnsupported(device=device['uuid'], reason=reason)
        board, ctrl = self._controller(device)
        lba_size = (board.get('cleanup') or {}).get('lba_size')
        # [nvme] blkdiscard is the block_io daemon's own setting (steward/privsep).
        cleanup = board.get('cleanup') or {}
        nvme_cleanup.Cleaner(self.cli, ctrl, job, device['uuid'], lba_size=lba_size,
                             reason=cleanup.get('reason'),
                             discovered=cleanup.get('identify')).run(action)
        # Issue 38: the drive's own report once it is clean; a failing drive goes
        # back to error rather than to the next tenant.
        job.record['health'] = self._health(ctrl)
        return job.record

    def describe_interrupted(self, device):
        """What the hardware says of a cleanup the agent did not see finish."""
        try:
            board, ctrl = self._controller(device)
        except exception.CleanupFailed as err:
            return str(err)
        text = nvme_cleanup.read_interrupted(self.cli, ctrl)
        if board.get('cleanup_action') in (nvme_policy.WRITE_ZEROES, nvme_policy.SHRED):
            text = f'zeroing ({board["cleanup_action"]}) was cut short; {text}'
        elif board.get('cleanup_action') in nvme_policy.FORMATS:
            text = (f'Format NVM ({board["cleanup_action"]}) was cut short (a format the '
                    f'controller had begun completes on its own); {text}')
        return text

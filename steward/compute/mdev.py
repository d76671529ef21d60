"""Mediated devices for MDEV ARQs: created before the domain, removed on delete.

The mdev's UUID is the ARQ's attach_handle_uuid and its type the handle's
``asked_type`` (spec 5). Two backends (``[compute] mdev_backend``):

* ``libvirt``: a persistent node device, as Nova's ``_create_mdev`` makes it:
  ``virsh nodedev-define`` of the nodedev XML below, ``nodedev-start`` and
  ``nodedev-autostart`` (so it comes back after a reboot); removal is
  ``nodedev-destroy`` + ``nodedev-undefine``. virsh, from libvirt-clients, is
  used rather than libvirt-python, which needs a C build against libvirt-dev.
* ``sysfs``: the kernel interface, on a host without libvirt: the UUID written to
  ``<root>/class/mdev_bus/<parent>/mdev_supported_types/<type>/create``, ``1``
  to ``<uuid>/remove``. Not persistent across reboots.

An mdev that already exists with this UUID (a boot interrupted after creating it,
or one the operator made) is used as it is; only mdevs this side created are
removed, and the record saying so is written before the creation.
"""
import logging
import os
import re
import shutil
import subprocess
import tempfile

from lxml import etree

from steward.common import exception

LOG = logging.getLogger(__name__)

VIRSH_TIMEOUT = 60


def _failed(record, reason):
    """MdevFailed about the mdev of ``record``."""
    return exception.MdevFailed(uuid=record['uuid'], parent=record['parent'],
                                type=record['type'], reason=reason)


def nodedev_name(handle):
    """The name libvirt gives a defined mdev node device, mdev_<uuid>_<parent>
    (recent libvirt appends the parent, so one UUID may exist under two parents).
    libvirt names the device itself on define; the name virsh reports then is the
    one used afterwards."""
    return 'mdev_' + re.sub(r'[^0-9A-Za-z]', '_', f'{handle.uuid}_{handle.parent}')


def nodedev_xml(record):
    """libvirt node-device XML defining the mdev of ``record`` (``<device>``)."""
    device = etree.Element('device')
    etree.SubElement(device, 'name').text = record['nodedev']
    etree.SubElement(device, 'parent').text = record['nodedev_parent']
    cap = etree.SubElement(device, 'capability', type='mdev')
    etree.SubElement(cap, 'type', id=record['type'])
    etree.SubElement(cap, 'uuid').text = record['uuid']
    return device


def record_for(handle, backend):
    """What is stored about one mdev of an instance (state.py keeps it)."""
    return {'uuid': handle.uuid, 'type': handle.mdev_type, 'parent': handle.parent,
            'nodedev_parent': handle.nodedev_parent, 'backend': backend,
            'nodedev': nodedev_name(handle), 'pre_existing': False}


class SysfsMdevs:
    name = 'sysfs'

    def __init__(self, root):
        self.root = root

    def _parent_dir(self, parent):
        return os.path.join(self.root, 'class', 'mdev_bus', parent)

    def _existing(self, record):
        for path in (os.path.join(self.root, 'bus', 'mdev', 'devices', record['uuid']),
                     os.path.join(self._parent_dir(record['parent']), record['uuid'])):
            if os.path.isdir(path):
                return path
        return None

    def plan(self, handle):
        record = record_for(handle, self.name)
        existing = self._existing(record)
        if existing:
            type_link = os.path.join(existing, 'mdev_type')
            have = os.path.basename(os.readlink(type_link)) \
                if os.path.islink(type_link) else None
            if have not in (None, handle.mdev_type):
                raise exception.MdevFailed(uuid=handle.uuid, parent=handle.parent,
                                           type=handle.mdev_type,
                                           reason=f'it exists with type {have}')
            record['pre_existing'] = True
        return record

    def create(self, record):
        if record['pre_existing']:
            LOG.info('mdev %s already exists; using it', record['uuid'])
            return
        type_dir = os.path.join(self._parent_dir(record['parent']),
                                'mdev_supported_types', record['type'])
        if not os.path.isdir(type_dir):
            raise _failed(record, f'{type_dir} does not exist (no such parent or type; '
                                  f'vendor mdev module loaded?)')
        try:
            with open(os.path.join(type_dir, 'create'), 'w') as f:
                f.write(record['uuid'])
        except OSError as err:
            raise _failed(record, f'writing {type_dir}/create: '
                                  f'{err.strerror or err}') from None
        LOG.info('Created mdev %s (type %s on %s) through sysfs', record['uuid'],
                 record['type'], record['parent'])

    def remove(self, record):
        """Remove the mdev; False when it was already gone."""
        existing = self._existing(record)
        if existing is None:
            return False
        try:
            with open(os.path.join(existing, 'remove'), 'w') as f:
                f.write('1')
        except OSError as err:
            raise _failed(record, f'writing {existing}/remove: '
                                  f'{err.strerror or err}') from None
        LOG.info('Removed mdev %s through sysfs', record['uuid'])
        return True


class LibvirtMdevs:
    name = 'libvirt'

    def __init__(self, uri, virsh='virsh'):
        self.uri = uri
        self.virsh = virsh

    def _run(self, record, *args):
        try:
            out = subprocess.run([self.virsh, '-c', self.uri, *args], capture_output=True,
                                 text=True, timeout=VIRSH_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise _failed(record, f'virsh {args[0]}: {err}') from None
        return out.returncode, out.stdout.strip(), ' '.join(out.stderr.split())

    def _check(self, record, *args):
        rc, stdout, stderr = self._run(record, *args)
        if rc != 0:
            raise _failed(record, f'virsh -c {self.uri} {args[0]}: {stderr}')
        return stdout

    def plan(self, handle):
        return record_for(handle, self.name)

    def create(self, record):
        with tempfile.NamedTemporaryFile('w', suffix='.xml', prefix='steward-mdev-') as f:
            f.write(etree.tostring(nodedev_xml(record), encoding='unicode'))
            f.flush()
            out = self._check(record, 'nodedev-define', f.name)
        m = re.search(r"'([^']+)'", out)
        if m:
            record['nodedev'] = m.group(1)
        try:
            self._check(record, 'nodedev-start', record['nodedev'])
            self._check(record, 'nodedev-autostart', record['nodedev'])
        except exception.MdevFailed:
            self._run(record, 'nodedev-destroy', record['nodedev'])
            self._run(record, 'nodedev-undefine', record['nodedev'])
            raise
        LOG.info('Created persistent mdev %s (node device %s, type %s on %s)',
                 record['uuid'], record['nodedev'], record['type'],
                 record['nodedev_parent'])

    def remove(self, record):
        """Stop and undefine the node device; False when libvirt had no such one."""
        if record.get('pre_existing'):
            return False
        found = False
        for action, harmless in (('nodedev-destroy', ('not found', 'not active')),
                                 ('nodedev-undefine', ('not found',))):
            rc, _, stderr = self._run(record, action, record['nodedev'])
            if rc == 0:
                found = True
            elif not any(h in stderr.lower() for h in harmless):
                raise _failed(record, f'virsh -c {self.uri} {action}: {stderr}')
            elif 'not active' in stderr.lower():
                found = True
        if found:
            LOG.info('Removed mdev %s (node device %s)', record['uuid'], record['nodedev'])
        return found


def libvirt_reachable(uri, virsh='virsh'):
    if shutil.which(virsh) is None:
        return False
    try:
        return subprocess.run([virsh, '-c', uri, 'uri'], capture_output=True,
                              timeout=VIRSH_TIMEOUT).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def backend(conf, kind=None):
    """The backend ``[compute] mdev_backend`` (or ``kind``) names."""
    kind = kind or conf.compute.mdev_backend
    if kind == 'auto':
        kind = 'libvirt' if libvirt_reachable(conf.compute.libvirt_uri) else 'sysfs'
    if kind == 'libvirt':
        return LibvirtMdevs(conf.compute.libvirt_uri)
    return SysfsMdevs(conf.compute.mdev_sysfs_root)


def for_record(conf, record):
    """The backend that created ``record`` (delete must undo it the same way)."""
    return backend(conf, kind=record['backend'])

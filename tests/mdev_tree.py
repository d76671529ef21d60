"""Fake mediated-device sysfs trees in the kernel's layout, for driver tests.

    /sys/devices/pci0000:00/<bdf>/                 a PCI parent (tests.sysfs_tree.make_pci)
    /sys/devices/virtual/<class>/<name>/           a virtual parent (mtty, mdpy)
        mdev_supported_types/<type>/{name,available_instances,device_api,description,
                                     create, devices/<uuid> -> ../../../<uuid>}
        <uuid>/mdev_type -> ../mdev_supported_types/<type>     an existing mdev
    /sys/class/mdev_bus/<parent> -> ../../devices/...            the parent's symlink
    /sys/bus/mdev/devices/<uuid> -> ../../../devices/.../<uuid>

Values are written the way sysfs shows them: one line ending in a newline.
"""
import os
import pathlib
import uuid as uuidlib

from tests import sysfs_tree

# The kernel's sample drivers (samples/vfio-mdev) when idle, and a GVT-g iGPU.
MTTY_TYPES = {
    'mtty-1': {'available': 24, 'name': 'Single port serial'},
    'mtty-2': {'available': 12, 'name': 'Dual port serial'},
}
MDPY_TYPES = {
    'mdpy-vga': {'available': 4, 'name': 'mdpy-vga',
                 'description': 'virtual display, 640x480 framebuffer'},
    'mdpy-xga': {'available': 4, 'name': 'mdpy-xga',
                 'description': 'virtual display, 1024x768 framebuffer'},
    'mdpy-hd': {'available': 4, 'name': 'mdpy-hd',
                'description': 'virtual display, 1920x1080 framebuffer'},
}
I915_TYPES = {
    'i915-GVTg_V5_4': {'available': 8, 'name': None,
                       'description': 'low_gm_size: 128MB\nhigh_gm_size: 512MB\n'
                                      'fence: 4\nresolution: 1920x1200\nweight: 4'},
}


class MdevTree:
    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.parents = {}           # parent name -> its real device directory
        (self.root / 'class' / 'mdev_bus').mkdir(parents=True, exist_ok=True)
        (self.root / 'bus' / 'mdev' / 'devices').mkdir(parents=True, exist_ok=True)

    # -- parents ---------------------------------------------------------------------
    def add_pci_parent(self, bdf, types, vendor='0x8086', product='0x1912',
                       cls='0x030000', physfn=None):
        path = self.root / 'devices' / 'pci0000:00' / bdf
        if not path.exists():
            sysfs_tree.make_pci(self.root, bdf, vendor, product, cls=cls, physfn=physfn)
        return self._register(bdf, path, types)

    def add_virtual_parent(self, name, types, device_class=None):
        path = self.root / 'devices' / 'virtual' / (device_class or name) / name
        path.mkdir(parents=True, exist_ok=True)
        return self._register(name, path, types)

    def _register(self, name, path, types):
        self.parents[name] = path
        link = self.root / 'class' / 'mdev_bus' / name
        os.symlink(os.path.relpath(path, link.parent), link)
        for type_id, spec in types.items():
            self.add_type(name, type_id, **spec)
        return path

    # -- types -----------------------------------------------------------------------
    def type_dir(self, parent, type_id):
        return self.parents[parent] / 'mdev_supported_types' / type_id

    def add_type(self, parent, type_id, available, name=None, device_api='vfio-pci',
                 description=None):
        d = self.type_dir(parent, type_id)
        (d / 'devices').mkdir(parents=True, exist_ok=True)
        (d / 'create').write_text('')
        self.write(parent, type_id, 'available_instances', available)
        if device_api is not None:
            self.write(parent, type_id, 'device_api', device_api)
        if name is not None:
            self.write(parent, type_id, 'name', name)
        if description is not None:
            self.write(parent, type_id, 'description', description)
        return d

    def write(self, parent, type_id, attr, value):
        """Write one attribute as sysfs shows it (``value`` and a newline)."""
        (self.type_dir(parent, type_id) / attr).write_text(f'{value}\n')

    def remove(self, parent, type_id, attr):
        (self.type_dir(parent, type_id) / attr).unlink()

    def available(self, parent, type_id):
        return int((self.type_dir(parent, type_id) / 'available_instances').read_text())

    def set_available(self, parent, type_id, n):
        self.write(parent, type_id, 'available_instances', n)

    # -- instances -------------------------------------------------------------------
    def create_instance(self, parent, type_id, mdev_uuid=None):
        """What ``echo <uuid> > create`` does: the mdev directory, its links, and one
        fewer available instance of that type."""
        mdev_uuid = mdev_uuid or str(uuidlib.uuid4())
        parent_dir = self.parents[parent]
        inst = parent_dir / mdev_uuid
        inst.mkdir()
        tdir = self.type_dir(parent, type_id)
        os.symlink(os.path.relpath(tdir, inst), inst / 'mdev_type')
        (inst / 'remove').write_text('')
        os.symlink(os.path.relpath(inst, tdir / 'devices'), tdir / 'devices' / mdev_uuid)
        bus = self.root / 'bus' / 'mdev' / 'devices'
        os.symlink(os.path.relpath(inst, bus), bus / mdev_uuid)
        self.set_available(parent, type_id, self.available(parent, type_id) - 1)
        return mdev_uuid

    def remove_instance(self, parent, type_id, mdev_uuid):
        """What ``echo 1 > <uuid>/remove`` does."""
        tdir = self.type_dir(parent, type_id)
        (tdir / 'devices' / mdev_uuid).unlink()
        (self.root / 'bus' / 'mdev' / 'devices' / mdev_uuid).unlink()
        inst = self.parents[parent] / mdev_uuid
        for child in inst.iterdir():
            child.unlink()
        inst.rmdir()
        self.set_available(parent, type_id, self.available(parent, type_id) + 1)

"""The mdev driver says, once, which parents Nova cannot use: Nova 34 creates a
Cyborg mdev under the libvirt node device pci_<domain>_<bus>_<device>_<function>
(nova/virt/libvirt/driver.py _allocate_cyborg_mdevs), which a parent that is not
a PCI function does not have (tests/nova/test_nova_consumes_arqs.py shows it)."""
import json
import logging

from steward.drivers.mdev import driver as mdev
from tests.fixtures.mdev_tree import I915_TYPES, MDPY_TYPES, MTTY_TYPES, MdevTree

GVT = '0000:00:02.0'


def driver(conf, tmp_path, *entries):
    tree = MdevTree(tmp_path / 'sys')
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    tree.add_virtual_parent('mdpy', MDPY_TYPES)
    tree.add_pci_parent(GVT, I915_TYPES)
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [json.dumps(e) for e in entries], group='mdev')
    return mdev.MdevDriver(conf, 'host-a')


def warnings(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and 'not a PCI device' in r.getMessage()]


def test_one_warning_line_for_the_parents_nova_cannot_use(conf, tmp_path, caplog):
    drv = driver(conf, tmp_path, {'address': 'mtty', 'mdev_type': 'mtty-2'},
                 {'address': 'mdpy', 'mdev_type': 'mdpy-vga'},
                 {'address': GVT, 'mdev_type': 'i915-GVTg_V5_4'})
    with caplog.at_level(logging.WARNING, logger='steward.drivers.mdev'):
        for _ in range(3):                     # three discovery cycles
            assert len(drv.discover()) == 3
    (line,) = warnings(caplog)
    assert 'mdpy, mtty' in line and GVT not in line and 'doc/nova.md' in line


def test_pci_parents_only_say_nothing(conf, tmp_path, caplog):
    drv = driver(conf, tmp_path, {'address': GVT, 'mdev_type': 'i915-GVTg_V5_4'})
    with caplog.at_level(logging.WARNING, logger='steward.drivers.mdev'):
        assert len(drv.discover()) == 1
    assert warnings(caplog) == []

"""MdevBusManager against fake sysfs trees in the kernel's layout."""
import inspect
import logging
import os
import shutil

import pytest

from steward.drivers.mdev import bus as mdev_bus
from steward.drivers.mdev.bus import MdevBusManager
from tests.fixtures.mdev_tree import I915_TYPES, MDPY_TYPES, MTTY_TYPES, MdevTree

GVT = '0000:00:02.0'


@pytest.fixture
def tree(tmp_path):
    t = MdevTree(tmp_path / 'sys')
    t.add_virtual_parent('mtty', MTTY_TYPES)
    t.add_virtual_parent('mdpy', MDPY_TYPES)
    t.add_pci_parent(GVT, I915_TYPES)
    return t


@pytest.fixture
def bus(tree):
    return MdevBusManager(str(tree.root / 'class' / 'mdev_bus') + '/')


def test_interface_is_the_specs():
    public = sorted(n for n in dir(MdevBusManager) if not n.startswith('_'))
    assert public == ['discover_parent_devices', 'get_mdev_types']
    default = inspect.signature(MdevBusManager).parameters['sysfs_path'].default
    assert default == '/sys/class/mdev_bus/'


def test_parents_are_symlinks_to_device_directories(tree, bus):
    link = tree.root / 'class' / 'mdev_bus' / 'mtty'
    assert link.is_symlink()
    assert os.path.realpath(link) == str(tree.root / 'devices' / 'virtual' / 'mtty' / 'mtty')
    assert bus.discover_parent_devices(['*']) == [GVT, 'mdpy', 'mtty']


@pytest.mark.parametrize('pci_filter,expected', [
    (None, []),
    ([], []),
    (['*'], [GVT, 'mdpy', 'mtty']),
    (['mtty'], ['mtty']),
    (['0000:00:02.0', 'mtty'], [GVT, 'mtty']),
    (['0000:00:02.0'.upper()], [GVT]),            # addresses match whatever their case
    (['MTTY'], []),                                 # other names are exact
    (['0000:99:00.0', 'nosuch'], []),               # listed but not present
])
def test_discover_parent_devices_filter(bus, pci_filter, expected):
    assert bus.discover_parent_devices(pci_filter) == expected


def test_no_mdev_bus_at_all(tmp_path, caplog):
    bus = MdevBusManager(str(tmp_path / 'nothing') + '/')
    with caplog.at_level(logging.INFO):
        assert bus.discover_parent_devices(['*']) == []
    assert 'does not exist' in caplog.text


def test_dangling_parent_link_is_skipped(tree, bus, caplog):
    os.symlink('../../devices/virtual/gone/gone', tree.root / 'class' / 'mdev_bus' / 'gone')
    assert bus.discover_parent_devices(['*']) == [GVT, 'mdpy', 'mtty']
    assert 'mdev parent gone' in caplog.text


def test_mtty_types(bus):
    assert bus.get_mdev_types('mtty') == [
        {'type_name': 'mtty-1', 'name': 'Single port serial', 'available_instances': 24,
         'device_api': 'vfio-pci', 'description': '', 'created_instances': 0},
        {'type_name': 'mtty-2', 'name': 'Dual port serial', 'available_instances': 12,
         'device_api': 'vfio-pci', 'description': '', 'created_instances': 0},
    ]


def test_gvt_type_on_a_pci_parent_without_a_name_file(bus):
    [t] = bus.get_mdev_types(GVT)
    assert t['type_name'] == 'i915-GVTg_V5_4'
    assert t['name'] == ''
    assert t['description'].startswith('low_gm_size: 128MB\nhigh_gm_size')
    assert (t['available_instances'], t['created_instances']) == (8, 0)


def test_type_filter(bus):
    assert [t['type_name'] for t in bus.get_mdev_types('mdpy')] == [
        'mdpy-hd', 'mdpy-vga', 'mdpy-xga']
    assert [t['type_name'] for t in bus.get_mdev_types('mdpy', ['mdpy-xga', 'x'])] == [
        'mdpy-xga']
    assert len(bus.get_mdev_types('mdpy', [])) == 3


def test_existing_instances_are_counted(tree, bus):
    created = [tree.create_instance('mtty', 'mtty-2') for _ in range(3)]
    [t] = bus.get_mdev_types('mtty', ['mtty-2'])
    assert (t['available_instances'], t['created_instances']) == (9, 3)
    # each in the kernel's layout: <parent>/<uuid> with its mdev_type link
    inst = tree.parents['mtty'] / created[0]
    assert os.path.realpath(inst / 'mdev_type') == str(tree.type_dir('mtty', 'mtty-2'))
    assert (tree.root / 'bus' / 'mdev' / 'devices' / created[0]).is_symlink()
    tree.remove_instance('mtty', 'mtty-2', created[0])
    [t] = bus.get_mdev_types('mtty', ['mtty-2'])
    assert (t['available_instances'], t['created_instances']) == (10, 2)


@pytest.mark.parametrize('value', ['abc', '-1', '', '1.5'])
def test_malformed_available_instances_skips_only_that_type(tree, bus, caplog, value):
    tree.write('mtty', 'mtty-1', 'available_instances', value)
    with caplog.at_level(logging.ERROR):
        assert [t['type_name'] for t in bus.get_mdev_types('mtty')] == ['mtty-2']
    assert 'mdev type mtty-1 of mtty: available_instances holds' in caplog.text


def test_missing_mandatory_files(tree, bus, caplog):
    tree.remove('mtty', 'mtty-1', 'available_instances')
    tree.remove('mtty', 'mtty-2', 'device_api')
    assert bus.get_mdev_types('mtty') == []
    assert 'available_instances is missing' in caplog.text
    assert 'device_api is missing or empty' in caplog.text


def test_missing_optional_files_and_devices_dir(tree, bus):
    tree.remove('mtty', 'mtty-2', 'name')
    (tree.type_dir('mtty', 'mtty-2') / 'devices').rmdir()
    [t] = bus.get_mdev_types('mtty', ['mtty-2'])
    assert (t['name'], t['description'], t['created_instances']) == ('', '', 0)


def test_unreadable_binary_file_is_absent(tree, bus):
    (tree.type_dir('mtty', 'mtty-2') / 'name').write_bytes(b'\xff\xfe\n')
    [t] = bus.get_mdev_types('mtty', ['mtty-2'])
    assert t['name'] == ''


def test_unknown_parent_gives_no_types(bus, caplog):
    assert bus.get_mdev_types('0000:99:00.0') == []
    assert 'mdev parent 0000:99:00.0: cannot list' in caplog.text


def test_a_problem_is_logged_once_while_it_lasts(tree, bus, caplog):
    tree.write('mtty', 'mtty-1', 'available_instances', 'x')

    def cycle():
        bus.discover_parent_devices(['*'])
        return bus.get_mdev_types('mtty')

    with caplog.at_level(logging.ERROR, logger=mdev_bus.__name__):
        for _ in range(3):
            assert len(cycle()) == 1
        assert caplog.text.count('available_instances holds') == 1
        tree.write('mtty', 'mtty-1', 'available_instances', '24')
        assert len(cycle()) == 2
        tree.write('mtty', 'mtty-1', 'available_instances', 'y')
        cycle()
        assert caplog.text.count('available_instances holds') == 2


def test_a_type_registered_again_is_read_afresh(tree, bus):
    assert bus.get_mdev_types('mtty', ['mtty-2'])[0]['name'] == 'Dual port serial'
    # The vendor module reloaded: the type's directory is a new node with new files.
    shutil.rmtree(tree.type_dir('mtty', 'mtty-2'))
    tree.add_type('mtty', 'mtty-2', available=6, name='Dual port serial v2',
                  device_api='vfio-ccw', description='reloaded')
    [t] = bus.get_mdev_types('mtty', ['mtty-2'])
    assert (t['name'], t['device_api'], t['description'], t['available_instances']) == (
        'Dual port serial v2', 'vfio-ccw', 'reloaded', 6)

"""The compute side's mdev backends: sysfs on a fake mdev tree (the kernel's
layout, tests/fixtures/mdev_tree.py), and virsh against libvirt's test driver."""
import shutil

import pytest

from steward.common import exception
from steward.compute import handles
from steward.compute import mdev
from tests.fixtures import requirements
from tests.fixtures.mdev_tree import MTTY_TYPES, MdevTree

UUID = '4b20d080-1b54-4048-85b3-a6a62d165c01'
GVT = '0000:00:02.0'


def arq(parent_fields, asked_type):
    return {'uuid': 'a1', 'attach_handle_type': 'MDEV', 'attach_handle_uuid': UUID,
            'attach_handle_info': dict(parent_fields, asked_type=asked_type)}


VIRTUAL = {'domain': '', 'bus': '', 'device': 'mtty', 'function': ''}
PCI = {'domain': '0000', 'bus': '00', 'device': '02', 'function': '0'}


@pytest.fixture
def tree(tmp_path):
    t = MdevTree(tmp_path / 'sys')
    t.add_virtual_parent('mtty', MTTY_TYPES)
    t.add_pci_parent(GVT, {'i915-GVTg_V5_4': {'available': 2}})
    return t


@pytest.mark.parametrize('fields, parent, type_id', [
    (VIRTUAL, 'mtty', 'mtty-2'), (PCI, GVT, 'i915-GVTg_V5_4')])
def test_sysfs_create_and_remove(tree, fields, parent, type_id):
    backend = mdev.SysfsMdevs(str(tree.root))
    record = backend.plan(handles.mdev(arq(fields, type_id)))
    assert (record['parent'], record['pre_existing'], record['backend']) == (
        parent, False, 'sysfs')
    backend.create(record)
    assert (tree.type_dir(parent, type_id) / 'create').read_text() == UUID
    assert backend.remove(record) is False          # the kernel has not made it
    tree.create_instance(parent, type_id, UUID)     # now it has
    assert backend.remove(record) is True
    assert (tree.parents[parent] / UUID / 'remove').read_text() == '1'


def test_sysfs_existing_mdev_is_used_not_recreated(tree):
    tree.create_instance('mtty', 'mtty-2', UUID)
    (tree.type_dir('mtty', 'mtty-2') / 'create').write_text('untouched')
    backend = mdev.SysfsMdevs(str(tree.root))
    record = backend.plan(handles.mdev(arq(VIRTUAL, 'mtty-2')))
    assert record['pre_existing'] is True
    backend.create(record)
    assert (tree.type_dir('mtty', 'mtty-2') / 'create').read_text() == 'untouched'


def test_sysfs_existing_mdev_of_another_type_is_refused(tree):
    tree.create_instance('mtty', 'mtty-1', UUID)
    with pytest.raises(exception.MdevFailed, match='exists with type mtty-1'):
        mdev.SysfsMdevs(str(tree.root)).plan(handles.mdev(arq(VIRTUAL, 'mtty-2')))


@pytest.mark.parametrize('fields, type_id', [(VIRTUAL, 'mtty-9'),
                                             ({**VIRTUAL, 'device': 'nope'}, 'mtty-2')])
def test_sysfs_unknown_parent_or_type(tree, fields, type_id):
    backend = mdev.SysfsMdevs(str(tree.root))
    record = backend.plan(handles.mdev(arq(fields, type_id)))
    with pytest.raises(exception.MdevFailed, match='does not exist') as exc:
        backend.create(record)
    assert exc.value.code == 'cyb.compute.mdev_failed'


def test_sysfs_write_error_is_reported(tree):
    create = tree.type_dir('mtty', 'mtty-2') / 'create'
    create.unlink()
    create.mkdir()          # writing fails like the kernel refusing the uuid
    backend = mdev.SysfsMdevs(str(tree.root))
    with pytest.raises(exception.MdevFailed, match='writing'):
        backend.create(backend.plan(handles.mdev(arq(VIRTUAL, 'mtty-2'))))


@pytest.fixture
def needs_virsh():
    if not shutil.which('virsh'):
        requirements.need('libvirt', 'virsh not installed (libvirt-clients)')


@pytest.mark.usefixtures('needs_virsh')
def test_libvirt_backend_reports_what_libvirt_says():
    """libvirt's test driver cannot define node devices: the error must be
    libvirt's own, cleanly wrapped."""
    backend = mdev.LibvirtMdevs('test:///default')
    record = backend.plan(handles.mdev(arq(PCI, 'i915-GVTg_V5_4')))
    assert record['nodedev'] == f"mdev_{UUID.replace('-', '_')}_0000_00_02_0"
    assert record['nodedev_parent'] == 'pci_0000_00_02_0'
    with pytest.raises(exception.MdevFailed, match='not supported') as exc:
        backend.create(record)
    assert 'nodedev-define' in str(exc.value)
    # Removing an mdev libvirt does not know is not an error (already gone).
    assert mdev.LibvirtMdevs('test:///default').remove(record) is False


@pytest.mark.usefixtures('needs_virsh')
def test_auto_backend_follows_libvirt_reachability(conf, tmp_path):
    conf.set_override('mdev_sysfs_root', str(tmp_path), group='compute')
    conf.set_override('libvirt_uri', 'test:///default', group='compute')
    assert isinstance(mdev.backend(conf), mdev.LibvirtMdevs)
    conf.set_override('libvirt_uri', 'qemu+unix:///system?socket=/nonexistent',
                      group='compute')
    chosen = mdev.backend(conf)
    assert isinstance(chosen, mdev.SysfsMdevs) and chosen.root == str(tmp_path)
    assert isinstance(mdev.for_record(conf, {'backend': 'libvirt'}), mdev.LibvirtMdevs)

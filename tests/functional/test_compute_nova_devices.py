"""Spec 5's warning: a device an ARQ hands over that Nova's own PCI device_spec
also lists. Devices are read from a fake sysfs tree in the kernel's layout."""
import json
import logging

import pytest

from steward.common import exception
from steward.compute import nova_devices
from tests.fixtures.sysfs_tree import make_pci

VF, OTHER, GVT = '0000:25:00.4', '0000:81:00.1', '0000:00:02.0'


def pci(bdf, uuid='a-pci'):
    d, b, rest = bdf.split(':')
    s, f = rest.split('.')
    return {'uuid': uuid, 'attach_handle_type': 'PCI', 'attach_handle_uuid': None,
            'attach_handle_info': {'domain': d, 'bus': b, 'device': s, 'function': f}}


def mdev(fields, uuid='a-mdev'):
    return {'uuid': uuid, 'attach_handle_type': 'MDEV',
            'attach_handle_uuid': '4b20d080-1b54-4048-85b3-a6a62d165c01',
            'attach_handle_info': dict(fields, asked_type='t')}


@pytest.fixture
def sysfs(tmp_path):
    root = tmp_path / 'sys'
    make_pci(root, VF, '0x10de', '0x25b6')
    make_pci(root, OTHER, '0x8086', '0x0d58')
    make_pci(root, GVT, '0x8086', '0x1912', cls='0x030000')
    return str(root)


def spec(**fields):
    return json.dumps(fields)


def test_vendor_product_spec_matches_the_device_read_from_sysfs(sysfs, caplog):
    arqs = [pci(VF, 'a1'), pci(OTHER, 'a2'), {'uuid': 'a3', 'attach_handle_type': 'TEST_PCI'}]
    with caplog.at_level(logging.WARNING, logger='steward.compute.nova_devices'):
        found = nova_devices.check(arqs, [spec(vendor_id='10de', product_id='25b6')],
                                   sysfs, 'inst-1')
    assert found == [('a1', VF, spec(vendor_id='10de', product_id='25b6'))]
    (record,) = caplog.records
    assert VF in record.getMessage() and 'inst-1' in record.getMessage()
    assert 'never by both' in record.getMessage()


def test_mdev_pci_parent_is_checked_virtual_parent_is_not(sysfs):
    arqs = [mdev({'domain': '0000', 'bus': '00', 'device': '02', 'function': '0'}, 'm1'),
            mdev({'domain': '', 'bus': '', 'device': 'mtty', 'function': ''}, 'm2')]
    found = nova_devices.check(arqs, [spec(vendor_id='8086'), spec(address='*:*:*.*')],
                               sysfs)
    assert [(u, a) for u, a, _ in found] == [('m1', GVT)]


def test_device_missing_from_sysfs_is_matched_on_address_only(sysfs):
    gone = '0000:99:00.0'
    assert nova_devices.check([pci(gone)], [spec(vendor_id='10de')], sysfs) == []
    assert [a for _, a, _ in nova_devices.check(
        [pci(gone)], [spec(address='0000:99:00.*')], sysfs)] == [gone]


def test_no_nova_spec_no_warning(sysfs, caplog):
    with caplog.at_level(logging.WARNING):
        assert nova_devices.check([pci(VF)], [], sysfs) == []
    assert not caplog.records


def test_bad_nova_spec_is_a_configuration_error(sysfs):
    with pytest.raises(exception.InvalidConfiguration,
                       match=r'\[compute\] nova_pci_device_spec'):
        nova_devices.check([pci(VF)], ['{"vendor_id": '], sysfs)

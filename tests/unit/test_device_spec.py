"""device_spec parsing and Nova-style matching against a fake sysfs tree."""
import pytest

from steward.common import exception
from steward.drivers.pci import device_spec
from steward.drivers.pci import sysfs as pci_sysfs
from tests.fixtures.sysfs_tree import make_pci


@pytest.fixture
def tree(tmp_path):
    make_pci(tmp_path, '0000:0a:00.0', '0x8086', '0x0d58')
    make_pci(tmp_path, '0000:0a:00.1', '0x8086', '0x154c', physfn='0000:0a:00.0',
             driver='vfio-pci')
    make_pci(tmp_path, '0000:0a:00.2', '0x8086', '0x154c', physfn='0000:0a:00.0')
    make_pci(tmp_path, '0001:81:00.0', '0x10de', '0x25b6', cls='0x030200')
    return tmp_path


def addresses(tree, raw):
    spec = device_spec.parse(raw)
    return [str(d.address) for d in pci_sysfs.list_devices(str(tree))
            if spec.matches(d, str(tree))]


def test_sysfs_reader_sees_pf_vfs_and_driver(tree):
    devs = {str(d.address): d for d in pci_sysfs.list_devices(str(tree))}
    pf, vf = devs['0000:0a:00.0'], devs['0000:0a:00.1']
    assert (pf.vendor_id, pf.product_id, pf.is_vf, pf.has_vfs) == ('8086', '0d58', False, True)
    assert [str(a) for a in pf.virtfns] == ['0000:0a:00.1', '0000:0a:00.2']
    assert (str(vf.physfn), vf.driver) == ('0000:0a:00.0', 'vfio-pci')
    assert devs['0001:81:00.0'].class_code == '030200'


@pytest.mark.parametrize('raw,expected', [
    ('{"vendor_id": "8086"}', ['0000:0a:00.0', '0000:0a:00.1', '0000:0a:00.2']),
    ('{"vendor_id": "8086", "product_id": "154C"}', ['0000:0a:00.1', '0000:0a:00.2']),
    ('{"address": "*:0a:00.*"}', ['0000:0a:00.0', '0000:0a:00.1', '0000:0a:00.2']),
    ('{"address": "0a:00.1"}', ['0000:0a:00.1']),
    ('{"address": "0001:81:00.0"}', ['0001:81:00.0']),
    ('{"address": {"domain": ".*", "bus": "0a", "slot": "00", "function": "[1-3]"}}',
     ['0000:0a:00.1', '0000:0a:00.2']),
    ('{"address": {"bus": "81"}}', ['0001:81:00.0']),
    ('{"vendor_id": "10de", "address": "*:0a:*.*"}', []),
    ('{}', ['0000:0a:00.0', '0000:0a:00.1', '0000:0a:00.2', '0001:81:00.0']),
])
def test_matching(tree, raw, expected):
    assert addresses(tree, raw) == expected


@pytest.mark.parametrize('raw,fragment', [
    ('not json', 'not valid JSON'),
    ('["a"]', 'must be a JSON object'),
    ('{"vendor_id": "xyz"}', 'hex id'),
    ('{"address": "0a-00"}', 'bus:slot.function'),
    ('{"address": {"bus": "("}}', 'bad regex'),
    ('{"address": {"pci": "0a"}}', 'unknown address field'),
    ('{"address": 7}', 'string glob or a dict'),
])
def test_invalid_entries_are_quoted(raw, fragment):
    with pytest.raises(exception.InvalidConfiguration) as err:
        device_spec.parse(raw)
    assert fragment in str(err.value) and raw in str(err.value)


def test_nova_provider_names_give_the_pci_address():
    from steward.conductor.report import placement_sync
    assert placement_sync.nova_provider_address('cn1_0000:AF:00.1') == '0000:af:00.1'
    assert placement_sync.nova_provider_address('cn1.example.org_pci_0000_84_00_0') == \
        '0000:84:00.0'
    assert placement_sync.nova_provider_address('cn1_PCI_0000_84_00_0') == '0000:84:00.0'
    for other in ('cn1', 'cn1_0000:84:00', 'cn1_pci_0000_84_00', 'cn1_nova_fpga',
                  'cn1_pci_0000_84_00_8', 'cn1_0000_84_00_0'):
        assert placement_sync.nova_provider_address(other) is None, other

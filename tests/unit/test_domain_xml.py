"""Domain and nodedev XML from bound ARQs, checked by libvirt itself: its RelaxNG
schemas (lxml), ``virt-xml-validate``, ``virsh define --validate`` on the test
driver, and libvirt-python's ``defineXMLFlags(VIR_DOMAIN_DEFINE_VALIDATE)`` when
that module is installed."""
import logging
import os
import shutil
import subprocess

from lxml import etree
import pytest

from steward.common import exception
from steward.compute import domain_xml
from steward.compute import handles
from steward.compute import mdev
from tests.fixtures import requirements

SCHEMAS = '/usr/share/libvirt/schemas'
INSTANCE = '0b5b3a4e-6f0e-4a43-9b56-2d1f7d2c1e10'
MDEV_UUID = 'c2177883-f1bb-47f0-914d-32a22e3a8804'

def pci_arq(managed=..., bus='25', device='00', function='4', uuid='a-pci'):
    info = {'domain': '0000', 'bus': bus, 'device': device, 'function': function}
    if managed is not ...:
        info['managed'] = managed
    return {'uuid': uuid, 'state': 'Bound', 'attach_handle_type': 'PCI',
            'attach_handle_uuid': 'f0c4b7a5-3f5e-4a53-a2a0-5a0f3c6b9d11',
            'device_profile_group_id': 0, 'attach_handle_info': info}


def mdev_arq(uuid=MDEV_UUID, asked_type='mtty-2', **addr):
    info = {'asked_type': asked_type, 'domain': '0000', 'bus': '10', 'device': '1',
            'function': '0'}
    info.update(addr)
    return {'uuid': 'a-mdev', 'state': 'Bound', 'attach_handle_type': 'MDEV',
            'attach_handle_uuid': uuid, 'device_profile_group_id': 0,
            'attach_handle_info': info}


def fake_arq(uuid='a-test'):
    return {'uuid': uuid, 'state': 'Bound', 'attach_handle_type': 'TEST_PCI',
            'attach_handle_uuid': 'e5b5a3c2-0000-4000-8000-000000000001',
            'device_profile_group_id': 0,
            'attach_handle_info': {'domain': '0000', 'bus': '0c', 'device': '00',
                                   'function': '0'}}


def build(arqs, name='vm-test'):
    return domain_xml.to_string(domain_xml.domain(name, INSTANCE, 1, 512, arqs,
                                                  arch='x86_64'))


@pytest.fixture(scope='module')
def domain_rng():
    if not os.path.exists(f'{SCHEMAS}/domain.rng'):
        requirements.need('libvirt', 'libvirt schemas not installed (Debian libvirt0, '
                                     'pulled in by libvirt-clients)')
    return etree.RelaxNG(etree.parse(f'{SCHEMAS}/domain.rng'))


@pytest.fixture(scope='module')
def nodedev_rng():
    if not os.path.exists(f'{SCHEMAS}/nodedev.rng'):
        requirements.need('libvirt', 'libvirt schemas not installed')
    return etree.RelaxNG(etree.parse(f'{SCHEMAS}/nodedev.rng'))


def assert_valid(rng, xml):
    doc = etree.fromstring(xml.encode())
    assert rng.validate(doc), (str(rng.error_log), xml)


def virt_xml_validate(tmp_path, xml, kind):
    if not shutil.which('virt-xml-validate') or not shutil.which('xmllint'):
        requirements.need('libvirt', 'virt-xml-validate/xmllint not installed '
                                     '(libvirt-clients, libxml2-utils)')
    path = tmp_path / f'{kind}.xml'
    path.write_text(xml)
    return subprocess.run(['virt-xml-validate', str(path), kind], capture_output=True,
                          text=True).returncode


def virsh_define(tmp_path, xml, name):
    """``virsh define --validate`` on a fresh test:///default; (rc, dumped XML)."""
    if not shutil.which('virsh'):
        requirements.need('libvirt', 'virsh not installed (libvirt-clients)')
    path = tmp_path / 'define.xml'
    path.write_text(xml)
    out = subprocess.run(['virsh', '-c', 'test:///default',
                          f'define --validate {path}; dumpxml {name}'],
                         capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout[out.stdout.find('<domain'):]


def hostdevs(xml):
    parser = etree.XMLParser(remove_blank_text=True)
    return etree.fromstring(xml.encode(), parser).findall('./devices/hostdev')


# -- PCI, managed mode (spec 4) ------------------------------------------------------
@pytest.mark.parametrize('managed, expected', [
    (..., 'yes'), (True, 'yes'), (False, 'no'), ('no', 'no'), ('yes', 'yes'),
    ('false', 'no'), ('True', 'yes'), ('off', 'no'), (0, 'no'), (1, 'yes')])
def test_pci_hostdev_managed(managed, expected, domain_rng, tmp_path):
    xml = build([pci_arq(managed)])
    (hostdev,) = hostdevs(xml)
    assert dict(hostdev.attrib) == {'mode': 'subsystem', 'type': 'pci',
                                    'managed': expected}
    assert [(c.tag, dict(c.attrib)) for c in hostdev] == [
        ('driver', {'name': 'vfio'}), ('source', {})]
    assert dict(hostdev.find('./source/address').attrib) == {
        'domain': '0x0000', 'bus': '0x25', 'slot': '0x00', 'function': '0x4'}
    assert_valid(domain_rng, xml)
    assert virt_xml_validate(tmp_path, xml, 'domain') == 0


def test_spec4_example_is_reproduced_exactly():
    """Spec 4's managed=False example, element for element."""
    (hostdev,) = hostdevs(build([pci_arq(False)]))
    expected = etree.fromstring(
        "<hostdev mode='subsystem' type='pci' managed='no'><driver name='vfio'/>"
        "<source><address domain='0x0000' bus='0x25' slot='0x00' function='0x4'/>"
        "</source></hostdev>")
    assert etree.tostring(hostdev, method='c14n') == etree.tostring(expected,
                                                                    method='c14n')


@pytest.mark.parametrize('managed', ['maybe', '', 2, None, [True], {'x': 1}])
def test_pci_bad_managed_is_refused(managed):
    with pytest.raises(exception.AttachHandleInvalid) as exc:
        build([pci_arq(managed)])
    assert exc.value.code == 'cyb.compute.attach_handle_invalid'
    assert 'managed' in str(exc.value)


@pytest.mark.parametrize('field, value', [
    ('bus', '181'), ('bus', 'zz'), ('device', '20'), ('function', '8'),
    ('bus', None), ('domain', '10000')])
def test_pci_bad_address_is_refused(field, value):
    arq = pci_arq()
    arq['attach_handle_info'][field] = value
    with pytest.raises(exception.AttachHandleInvalid):
        build([arq])


def test_pci_address_forms_are_normalised(domain_rng):
    xml = build([pci_arq(bus='0x81', device='1', function='0x1')])
    (hostdev,) = hostdevs(xml)
    assert dict(hostdev.find('./source/address').attrib) == {
        'domain': '0x0000', 'bus': '0x81', 'slot': '0x01', 'function': '0x1'}
    assert_valid(domain_rng, xml)


# -- MDEV (spec 5) ---------------------------------------------------------------------
def test_mdev_hostdev(domain_rng, tmp_path):
    xml = build([mdev_arq()])
    (hostdev,) = hostdevs(xml)
    assert dict(hostdev.attrib) == {'mode': 'subsystem', 'type': 'mdev',
                                    'model': 'vfio-pci'}
    assert [c.tag for c in hostdev] == ['source']
    assert dict(hostdev.find('./source/address').attrib) == {'uuid': MDEV_UUID}
    assert_valid(domain_rng, xml)
    assert virt_xml_validate(tmp_path, xml, 'domain') == 0


@pytest.mark.parametrize('change', [
    {'attach_handle_uuid': 'not-a-uuid'}, {'asked_type': ''}, {'asked_type': '../x'},
    {'bus': '1ff'}, {'domain': '', 'bus': '', 'function': '', 'device': '..'},
    {'domain': '', 'bus': '', 'function': '', 'device': ''}])
def test_mdev_bad_handle_is_refused(change):
    arq = mdev_arq()
    if 'attach_handle_uuid' in change:
        arq.update(change)
    else:
        arq['attach_handle_info'].update(change)
    with pytest.raises(exception.AttachHandleInvalid):
        build([arq])


def test_virtual_parent_mdev(domain_rng):
    """The mdev driver's form for mtty/mdpy parents: name in ``device``."""
    arq = mdev_arq(domain='', bus='', device='mtty', function='')
    assert handles.mdev(arq).parent == 'mtty' and handles.mdev(arq).pci is None
    (hostdev,) = hostdevs(build([arq]))
    assert hostdev.find('source/address').get('uuid') == MDEV_UUID
    assert_valid(domain_rng, build([arq]))


def test_mixed_pci_and_mdev_and_unsupported(domain_rng, tmp_path, caplog):
    arqs = [pci_arq(False, uuid='p1'), fake_arq(), mdev_arq(),
            pci_arq(bus='26', uuid='p2')]
    with caplog.at_level(logging.INFO, logger='steward.compute.domain_xml'):
        xml = build(arqs)
    # mdevs first, then PCI in ARQ order (Nova's order); TEST_PCI left out.
    assert [(h.get('type'), h.get('managed')) for h in hostdevs(xml)] == [
        ('mdev', None), ('pci', 'no'), ('pci', 'yes')]
    assert_valid(domain_rng, xml)
    assert virt_xml_validate(tmp_path, xml, 'domain') == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and 'TEST_PCI' in lines[0] and INSTANCE in lines[0]


def test_only_unsupported_types_give_a_domain_without_hostdevs(domain_rng, caplog):
    with caplog.at_level(logging.INFO, logger='steward.compute.domain_xml'):
        xml = build([fake_arq('t1'), fake_arq('t2')])
    assert hostdevs(xml) == []
    assert_valid(domain_rng, xml)
    (record,) = caplog.records
    assert 'unsupported types: TEST_PCI.' in record.getMessage()


def test_domain_document(domain_rng):
    root = etree.fromstring(build([]).encode())
    assert root.tag == 'domain' and root.get('type') == 'kvm'
    assert root.findtext('name') == 'vm-test'
    assert root.findtext('uuid') == INSTANCE
    assert (root.find('memory').get('unit'), root.findtext('memory')) == ('MiB', '512')
    assert root.findtext('vcpu') == '1'
    assert root.find('os/type').text == 'hvm'
    assert_valid(domain_rng, build([]))


def test_schema_check_can_fail(domain_rng, tmp_path):
    """The validators used above do reject a broken hostdev."""
    xml = build([pci_arq()]).replace('managed="yes"', 'managed="maybe"')
    assert 'maybe' in xml
    assert not domain_rng.validate(etree.fromstring(xml.encode()))
    assert virt_xml_validate(tmp_path, xml, 'domain') != 0
    rc, _ = virsh_define(tmp_path, xml, 'vm-test')
    assert rc != 0


# -- libvirt itself accepts the documents ---------------------------------------------
def test_virsh_test_driver_accepts_mixed_domain(tmp_path):
    xml = build([pci_arq(False, uuid='p1'), mdev_arq(), pci_arq(bus='26', uuid='p2')])
    rc, dumped = virsh_define(tmp_path, xml, 'vm-test')
    assert rc == 0, dumped
    got = hostdevs(dumped)
    # libvirt normalises (an mdev hostdev gains managed='no'): compare what we set.
    assert [(h.get('type'), h.get('model'), h.get('managed')) for h in got] == [
        ('mdev', 'vfio-pci', 'no'), ('pci', None, 'no'), ('pci', None, 'yes')]
    assert got[0].find('source/address').get('uuid') == MDEV_UUID
    assert got[2].find('source/address').get('bus') == '0x26'


def test_libvirt_python_define_validate():
    libvirt = requirements.need_import(
        'libvirt', 'libvirt', 'libvirt-python not installed (needs libvirt-dev and '
                              'pkg-config to build; Debian python3-libvirt serves only '
                              '/usr/bin/python3)')
    xml = build([pci_arq(False), mdev_arq(), pci_arq(bus='26', uuid='p2')])
    conn = libvirt.open('test:///default')
    try:
        dom = conn.defineXMLFlags(xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        kinds = [h.get('type') for h in hostdevs(dom.XMLDesc(0))]
        assert kinds == ['mdev', 'pci', 'pci']
        bad = build([pci_arq(False)], name='vm-bad').replace('managed="no"',
                                                             'managed="maybe"')
        assert 'maybe' in bad
        with pytest.raises(libvirt.libvirtError):
            conn.defineXMLFlags(bad, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    finally:
        conn.close()


# -- nodedev XML for the persistent mdev ------------------------------------------------
@pytest.mark.parametrize('arq, parent, name', [
    (mdev_arq(), 'pci_0000_10_01_0', f"mdev_{MDEV_UUID.replace('-', '_')}_0000_10_01_0"),
    (mdev_arq(bus='0a', device='00', asked_type='nvidia-35'), 'pci_0000_0a_00_0',
     f"mdev_{MDEV_UUID.replace('-', '_')}_0000_0a_00_0"),
    (mdev_arq(domain='', bus='', device='mtty', function=''), 'mtty',
     f"mdev_{MDEV_UUID.replace('-', '_')}_mtty"),
])
def test_nodedev_xml(arq, parent, name, nodedev_rng, tmp_path):
    record = mdev.record_for(handles.mdev(arq), 'libvirt')
    element = mdev.nodedev_xml(record)
    xml = etree.tostring(element, encoding='unicode')
    assert element.findtext('name') == name
    assert element.findtext('parent') == parent
    cap = element.find('capability')
    assert cap.get('type') == 'mdev'
    assert cap.find('type').get('id') == arq['attach_handle_info']['asked_type']
    assert cap.findtext('uuid') == MDEV_UUID
    assert_valid(nodedev_rng, xml)
    assert virt_xml_validate(tmp_path, xml, 'nodedev') == 0


def test_nodedev_schema_check_can_fail(nodedev_rng, tmp_path):
    record = mdev.record_for(handles.mdev(mdev_arq()), 'libvirt')
    record['uuid'] = 'not-a-uuid'
    xml = etree.tostring(mdev.nodedev_xml(record), encoding='unicode')
    assert not nodedev_rng.validate(etree.fromstring(xml.encode()))
    assert virt_xml_validate(tmp_path, xml, 'nodedev') != 0

"""The real Nova 34 consumes Steward's real bound ARQs.

A running ``steward serve`` with the pci and mdev drivers over a fake sysfs tree
binds ARQs as Nova's conductor would (Placement allocation, then PATCH): PCI VFs
configured ``managed: false``, ``managed: true`` and without the key, and MDEV types
on each parent kind Steward supports (a PCI function, a virtual device such as the
mtty sample). Inside .venv-nova, Nova's own Cyborg client reads them and Nova's own
LibvirtDriver (over its fakelibvirt fixture) builds the guest
(tests/nova/nova_consumer.py): with Steward's series (contrib/nova) and without.
Every domain XML must pass libvirt's RelaxNG schema.

A live migration (contrib/nova 0005) with the same real ARQs: a second set of VFs
(another PF, the managed modes the other way round) and a GVT mdev on a second PCI
parent, bound as the destination's set of the PCI instance, stand in for the
destination host's ARQs; the patched LibvirtDriver builds the source's guest, runs
the destination's pre_live_migration (which creates its mdev) and builds its guest,
and rewrites the source's domain into the migrating XML, which must carry the
destination's addresses, managed modes and mdev uuid, and validate. (One
``steward serve`` has one host, and Steward binds a second set for an instance only
on another host, so the destination's set is bound to a second instance here: the
ARQs are the same; the two-host flow is tests/multihost's.)
"""
import os
import time
import uuid

import httpx
from lxml import etree
import pytest

from steward.api import microversion
from steward.compute import domain_xml
from tests.fixtures import requirements
from tests.fixtures.mdev_tree import I915_TYPES, MTTY_TYPES, MdevTree
from tests.nova import series
from tests.fixtures.stack import running_stack
from tests.fixtures.sysfs_tree import make_sriov

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(series.XDIST_GROUP)]

HOST = 'bench-host'
PF = '0000:25:00.0'
UNMANAGED, MANAGED, UNSET = '0000:25:00.4', '0000:25:00.5', '0000:25:00.6'
GVT = '0000:00:02.0'
# The live migration's destination set: another PF, managed the other way round,
# and another mdev parent.
PF2 = '0000:26:00.0'
DST_MANAGED, DST_UNMANAGED, DST_UNSET = '0000:26:00.4', '0000:26:00.5', '0000:26:00.6'
GVT2 = '0000:00:03.0'
# Steward's API 2.7 says how a device may move; the devices of the live migration
# are tagged live_migratable then (a Steward without 2.7 does not know the tag).
OFFERS_MOVE = microversion.MAX_VERSION >= microversion.Version(2, 7)
LIVE = ', "live_migratable": true' if OFFERS_MOVE else ''
PCI_RC = 'CUSTOM_PCI_10DE_25B6'
MTTY_RC, GVT_RC = 'CUSTOM_MDEV_MTTY_2', 'CUSTOM_MDEV_I915_GVTG_V5_4'
DOMAIN_RNG = '/usr/share/libvirt/schemas/domain.rng'
A2_4 = {'OpenStack-API-Version': 'accelerator 2.4'}
PLACEMENT = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'}


class Cloud:
    """Nova's conductor's part against ``steward serve``: device profiles, ARQs,
    the Placement claim on the chosen provider, the bind."""

    def __init__(self, st):
        self.st = st
        self.api = httpx.Client(base_url=st.url, timeout=30, trust_env=False)
        self.placement = httpx.Client(base_url=st.placement_url, timeout=30,
                                      trust_env=False, headers=PLACEMENT)

    def providers(self):
        root = self.placement.get('/resource_providers', params={'name': HOST}).json()
        rps = self.placement.get('/resource_providers', params={
            'in_tree': root['resource_providers'][0]['uuid']}).json()
        return {rp['name']: rp['uuid'] for rp in rps['resource_providers']}

    def rp(self, suffix):
        (found,) = [u for n, u in self.providers().items() if n.endswith(suffix)]
        return found

    def profile(self, rc):
        name = f'dp-{rc.lower()}'
        r = self.api.post('/v2/device_profiles', json=[{
            'name': name, 'groups': [{f'resources:{rc}': '1'}]}])
        assert r.status_code in (201, 409), r.text
        return name

    def boot(self, wanted):
        """One instance holding one bound ARQ per (rc, provider suffix) of
        ``wanted``; returns its uuid."""
        inst = str(uuid.uuid4())
        allocations, bindings = {}, {}
        for rc, suffix in wanted:
            arq = self.api.post('/v2/accelerator_requests', json={
                'device_profile_name': self.profile(rc)}).json()['arqs'][0]['uuid']
            rp = self.rp(suffix)
            allocations[rp] = {'resources': {rc: 1}}
            bindings[arq] = [{'op': 'add', 'path': '/hostname', 'value': HOST},
                             {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
                             {'op': 'add', 'path': '/instance_uuid', 'value': inst}]
        r = self.placement.put(f'/allocations/{inst}', json={
            'allocations': allocations, 'project_id': 'p', 'user_id': 'u',
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text
        r = self.api.patch('/v2/accelerator_requests', json=bindings)
        assert r.status_code == 202, r.text
        arqs = self.arqs(inst)
        assert [a['state'] for a in arqs] == ['Bound'] * len(wanted), arqs
        return inst

    def arqs(self, inst):
        return self.api.get('/v2/accelerator_requests', headers=A2_4,
                            params={'instance': inst}).json()['arqs']


@pytest.fixture(scope='module')
def cloud(tmp_path_factory):
    series.prepare()
    sysfs = tmp_path_factory.mktemp('nova-arqs') / 'sys'
    make_sriov(sysfs, PF, '0x10de', '0x2236', [UNMANAGED, MANAGED, UNSET],
               vf_product='0x25b6', vf_driver='vfio-pci')
    make_sriov(sysfs, PF2, '0x10de', '0x2236', [DST_MANAGED, DST_UNMANAGED, DST_UNSET],
               vf_product='0x25b6', vf_driver='vfio-pci')
    tree = MdevTree(sysfs)
    tree.add_pci_parent(GVT, I915_TYPES)
    tree.add_pci_parent(GVT2, I915_TYPES)
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    extra = (f'[DEFAULT]\nsysfs_root = {sysfs}\n'
             f'[agent]\nenabled_drivers = pci,mdev\n'
             f'[pci]\ndevice_spec = {{"address": "{UNMANAGED}", "managed": false{LIVE}}}\n'
             f'device_spec = {{"address": "{MANAGED}", "managed": true{LIVE}}}\n'
             f'device_spec = {{"address": "{UNSET}"{LIVE}}}\n'
             f'device_spec = {{"address": "{DST_MANAGED}", "managed": true{LIVE}}}\n'
             f'device_spec = {{"address": "{DST_UNMANAGED}", "managed": false{LIVE}}}\n'
             f'device_spec = {{"address": "{DST_UNSET}"{LIVE}}}\n'
             f'[mdev]\ndevice_spec = {{"address": "mtty", "mdev_type": "mtty-2", '
             f'"max_instances": 2}}\n'
             f'device_spec = {{"address": "{GVT}", "mdev_type": "i915-GVTg_V5_4", '
             f'"max_instances": 2{LIVE}}}\n'
             f'device_spec = {{"address": "{GVT2}", "mdev_type": "i915-GVTg_V5_4", '
             f'"max_instances": 2{LIVE}}}\n')
    with running_stack(extra_conf=extra) as st:
        c = Cloud(st)
        wanted = {PCI_RC, MTTY_RC, GVT_RC}
        end = time.monotonic() + 60
        while True:
            have = set()
            for rp in c.providers().values():
                have |= set(c.placement.get(
                    f'/resource_providers/{rp}/inventories').json()['inventories'])
            names = list(c.providers())
            if (wanted <= have and len([n for n in names if '0000:25:00.' in n]) == 3
                    and len([n for n in names if '0000:26:00.' in n]) == 3
                    and any(n.endswith(f'{GVT2}_i915-GVTg_V5_4') for n in names)):
                break
            assert time.monotonic() < end, (have, st.log()[-3000:])
            time.sleep(0.2)
        c.pci_inst = c.boot([(PCI_RC, UNMANAGED), (PCI_RC, MANAGED), (PCI_RC, UNSET),
                             (GVT_RC, f'{GVT}_i915-GVTg_V5_4')])
        c.mtty_inst = c.boot([(MTTY_RC, 'mtty_mtty-2')])
        # the live migration's destination set (see the module's docstring)
        c.dst_inst = c.boot([(PCI_RC, DST_MANAGED), (PCI_RC, DST_UNMANAGED),
                             (PCI_RC, DST_UNSET), (GVT_RC, f'{GVT2}_i915-GVTg_V5_4')])
        c.endpoint = f'{st.url}/v2'
        c.log = st.log
        yield c


@pytest.fixture(scope='module')
def patched(cloud, tmp_path_factory):
    return series.consume(cloud.endpoint, [cloud.pci_inst, cloud.mtty_inst],
                          tmp_path_factory.mktemp('patched'), patched=True,
                          moves=[(cloud.pci_inst, cloud.dst_inst)])


@pytest.fixture(scope='module')
def released(cloud, tmp_path_factory):
    return series.consume(cloud.endpoint, [cloud.pci_inst, cloud.mtty_inst],
                          tmp_path_factory.mktemp('released'), patched=False)


def parse(xml):
    return etree.fromstring(xml.encode(), etree.XMLParser(remove_blank_text=True))


def assert_valid(xml):
    if not os.path.exists(DOMAIN_RNG):
        requirements.need('libvirt', f'{DOMAIN_RNG} not installed')
    rng = etree.RelaxNG(etree.parse(DOMAIN_RNG))
    assert rng.validate(parse(xml)), rng.error_log


def pci_managed(xml):
    """{function: managed} of the domain's PCI hostdevs (bus 0x25)."""
    found = {}
    for h in parse(xml).findall('./devices/hostdev[@type="pci"]'):
        address = h.find('source/address')
        assert address.get('bus') == '0x25' and address.get('domain') == '0x0000'
        found[address.get('function')] = h.get('managed')
    return found


def mdev_uuids(xml):
    return [h.find('source/address').get('uuid')
            for h in parse(xml).findall('./devices/hostdev[@type="mdev"]')]


def by_function(arqs):
    return {a['attach_handle_info']['function']: a for a in arqs
            if a['attach_handle_type'] == 'PCI'}


# -- with the series ----------------------------------------------------------------
def test_patched_nova_reads_managed_at_2_4(cloud, patched):
    result = patched[cloud.pci_inst]
    # 2.4 or above: from 0003 the series reads ARQs at 2.7 (how they may move,
    # managed kept) when Steward offers it.
    expected = '2.7' if microversion.MAX_VERSION >= microversion.Version(2, 7) else '2.4'
    assert result['arq_microversion'] == expected, (result.get('endpoint_data'),
                                                    result.get('error'))
    assert 'error' not in result, result
    managed = {f: a['attach_handle_info']['managed']
               for f, a in by_function(result['arqs']).items()}
    assert managed == {'4': False, '5': True, '6': True}


def test_patched_nova_writes_managed_no_for_managed_false(cloud, patched):
    xml = patched[cloud.pci_inst]['xml']
    assert_valid(xml)
    assert pci_managed(xml) == {'0x4': 'no', '0x5': 'yes', '0x6': 'yes'}


def test_mdev_on_a_pci_parent_gets_the_arqs_uuid(cloud, patched, released):
    for result in (patched[cloud.pci_inst], released[cloud.pci_inst]):
        (mdev_arq,) = [a for a in result['arqs'] if a['attach_handle_type'] == 'MDEV']
        assert mdev_uuids(result['xml']) == [mdev_arq['attach_handle_uuid']]
        assert result['mdevs'] == [mdev_arq['attach_handle_uuid']]
        # Nova asks libvirt for the mdev under the parent's node device name.
        assert result['mdev_parents'] == ['pci_0000_00_02_0']


def test_mdev_on_a_virtual_parent_cannot_work_with_nova(cloud, patched, released):
    """The mtty parent is not a PCI device: Steward's handle has its name in
    ``device`` and empty address fields, and Nova 34 (patched or not) asks libvirt to
    create the mdev under ``pci___mtty_``, a node device that cannot exist (libvirt
    names an mdev parent after its bus: pci_*, css_*, ap_matrix). Steward's mdev
    driver says so at discovery (doc/nova.md)."""
    for result in (patched[cloud.mtty_inst], released[cloud.mtty_inst]):
        (arq,) = result['arqs']
        # (from 2.7 the handle also says how the device may move)
        address = {k: arq['attach_handle_info'][k]
                   for k in ('asked_type', 'domain', 'bus', 'device', 'function')}
        assert address == {
            'asked_type': 'mtty-2', 'domain': '', 'bus': '', 'device': 'mtty',
            'function': ''}
        assert result['mdev_parents'] == ['pci___mtty_']
    log = cloud.log()
    warned = [line for line in log.splitlines()
              if 'WARNING' in line and 'not a PCI device' in line]
    assert len(warned) == 1 and 'mtty' in warned[0], warned


def test_every_domain_xml_validates(cloud, patched, released):
    for results in (patched, released):
        for inst in (cloud.pci_inst, cloud.mtty_inst):
            assert_valid(results[inst]['xml'])


# -- without it: today's behaviour, documented --------------------------------------
def test_released_nova_attaches_managed_false_as_managed(cloud, released):
    """nova 34.0.0 as released: no microversion, so Steward answers at 2.0 without
    ``managed``, and the driver hard-codes managed='yes': a VF bound to a VFIO
    variant driver would be rebound to vfio-pci by libvirt."""
    result = released[cloud.pci_inst]
    assert 'error' not in result, result
    assert result['arq_microversion'] is None
    assert all('managed' not in a['attach_handle_info'] for a in result['arqs'])
    assert pci_managed(result['xml']) == {'0x4': 'yes', '0x5': 'yes', '0x6': 'yes'}


# -- steward compute is the same ----------------------------------------------------
def canonical(hostdevs, name):
    """The hostdevs as libvirt itself holds them: defined (with schema validation)
    on libvirt's test driver and read back, which settles what libvirt fills in
    (an mdev hostdev's managed='no'); then an explicit ``<driver name='vfio'/>``
    (steward compute writes it, spec 4's example has it, Nova leaves it to
    libvirt's default PCI backend) is dropped, and each one is written as C14N 2.0
    (attributes sorted), the list sorted."""
    libvirt = requirements.need_import('libvirt', 'libvirt', 'libvirt-python missing')
    domain = etree.fromstring(
        f"<domain type='test'><name>{name}</name><memory>524288</memory>"
        "<os><type>hvm</type></os><devices/></domain>")
    for h in hostdevs:
        domain.find('devices').append(h)
    conn = libvirt.open('test:///default')
    try:
        dom = conn.defineXMLFlags(etree.tostring(domain).decode(),
                                  libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        held = parse(dom.XMLDesc(0)).findall('./devices/hostdev')
    finally:
        conn.close()
    for h in held:
        for driver in h.findall('driver'):
            if driver.attrib == {'name': 'vfio'}:
                h.remove(driver)
    return sorted(etree.tostring(h, method='c14n2', strip_text=True).decode()
                  for h in held)


def test_steward_compute_writes_the_same_hostdevs_as_patched_nova(cloud, patched):
    result = patched[cloud.pci_inst]
    nova = parse(result['xml']).findall('./devices/hostdev')
    steward = domain_xml.hostdevs(cloud.arqs(cloud.pci_inst))
    assert len(nova) == len(steward) == 4
    assert canonical(nova, 'nova') == canonical(steward, 'steward')
    # Not vacuous: the managed modes and the mdev uuid are in what is compared.
    text = ' '.join(canonical(steward, 'steward'))
    assert text.count('managed="no"') == 2 and text.count('managed="yes"') == 2


# -- live migration (contrib/nova 0005) ---------------------------------------------
def move(cloud, patched):
    result = patched[f'{cloud.pci_inst}>{cloud.dst_inst}']
    assert 'error' not in result, result.get('error')
    return result


def pci_hostdevs(xml):
    """{(domain, bus, slot, function): managed} of the domain's PCI hostdevs."""
    found = {}
    for h in parse(xml).findall('./devices/hostdev[@type="pci"]'):
        a = h.find('source/address')
        found[tuple(a.get(k) for k in ('domain', 'bus', 'slot', 'function'))] = \
            h.get('managed')
    return found


def test_live_migration_domains_validate(cloud, patched):
    result = move(cloud, patched)
    for name in ('src_xml', 'dst_xml', 'migrating_xml'):
        assert_valid(result[name])


def test_migrating_xml_carries_the_destinations_devices(cloud, patched):
    """Every hostdev of the source's ARQs is rewritten to the destination's set:
    the other PF's functions with their own managed modes (the source's are the
    other way round), the mdev uuid of the destination's ARQ; nothing of the
    source's is left, and the hostdevs are those the destination itself builds
    from its ARQs."""
    result = move(cloud, patched)
    src = {'managed': pci_hostdevs(result['src_xml']),
           'mdevs': mdev_uuids(result['src_xml'])}
    assert src['managed'] == {('0x0000', '0x25', '0x00', '0x4'): 'no',
                              ('0x0000', '0x25', '0x00', '0x5'): 'yes',
                              ('0x0000', '0x25', '0x00', '0x6'): 'yes'}
    migrating = result['migrating_xml']
    # as each destination ARQ says: .4 managed, .5 not, .6 unset (managed)
    assert pci_hostdevs(migrating) == {('0x0000', '0x26', '0x00', '0x4'): 'yes',
                                       ('0x0000', '0x26', '0x00', '0x5'): 'no',
                                       ('0x0000', '0x26', '0x00', '0x6'): 'yes'}
    managed = {a['attach_handle_info']['function']: a['attach_handle_info']['managed']
               for a in result['dst_arqs'] if a['attach_handle_type'] == 'PCI'}
    assert managed == {'4': True, '5': False, '6': True}
    (dst_mdev,) = [a['attach_handle_uuid'] for a in result['dst_arqs']
                   if a['attach_handle_type'] == 'MDEV']
    assert mdev_uuids(migrating) == [dst_mdev] != src['mdevs']
    assert canonical(parse(migrating).findall('./devices/hostdev'), 'migrating') == \
        canonical(parse(result['dst_xml']).findall('./devices/hostdev'), 'dst')
    # only the hostdevs changed place: the guest keeps its devices in order
    assert [d.tag for d in parse(migrating).find('devices')] == \
        [d.tag for d in parse(result['src_xml']).find('devices')]


def test_destination_creates_its_mdev_before_the_guest_arrives(cloud, patched):
    assert move(cloud, patched)['dst_mdev_parents'] == ['pci_0000_00_03_0']


def test_live_migration_movability(cloud, patched):
    """Nova's check of both sets: with Steward's API 2.7, devices tagged
    live_migratable may go and the untagged mtty mdev may not (Steward's reason);
    without it, every ARQ is refused: the service does not say."""
    result = move(cloud, patched)
    mtty = patched[cloud.mtty_inst]['live_refusal']
    if OFFERS_MOVE:
        assert result['movable'] == {'source': None, 'destination': None}
        assert 'mdev device not tagged live_migratable' in mtty, mtty
    else:
        for refusal in (*result['movable'].values(), mtty):
            assert 'Cyborg API 2.7' in refusal, refusal

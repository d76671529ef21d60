"""`steward compute boot|list|delete` end to end: real `steward compute` processes
against a real `steward serve` (embedded Placement) running the fake, pci and mdev
drivers on a fake sysfs tree. Every boot is followed by a delete (or fails), and
ARQs, allocations, Placement inventories (reserved included), usages and device
states must then be exactly as before."""
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import httpx
from lxml import etree
import pytest

from tests.fixtures import requirements
from tests.fixtures.mdev_tree import I915_TYPES, MTTY_TYPES, MdevTree
from tests.fixtures.stack import free_port, running_stack
from tests.fixtures.sysfs_tree import make_sriov

pytestmark = pytest.mark.slow
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')
HOST = 'bench-host'
PF, UNMANAGED, MANAGED = '0000:25:00.0', '0000:25:00.4', '0000:25:00.5'
GVT = '0000:00:02.0'
PCI_RC = 'CUSTOM_PCI_10DE_25B6'
MTTY_RC, GVT_RC = 'CUSTOM_MDEV_MTTY_2', 'CUSTOM_MDEV_I915_GVTG_V5_4'
DOMAIN_RNG = '/usr/share/libvirt/schemas/domain.rng'
A2_4 = {'OpenStack-API-Version': 'accelerator 2.4'}


class Env:
    def __init__(self, st, tree, tmp):
        self.st, self.tree, self.tmp = st, tree, tmp
        self.conf = os.path.join(st.state_path, 'steward.conf')
        self.api = httpx.Client(base_url=st.url, timeout=30, trust_env=False)
        self.placement = httpx.Client(base_url=st.placement_url, timeout=30,
                                      trust_env=False, headers={
                                          'X-Auth-Token': 'admin',
                                          'OpenStack-API-Version': 'placement 1.39'})

    def compute(self, *args, extra=None):
        cmd = [STEWARD, 'compute', *args, '--config-file', self.conf]
        if extra:
            path = os.path.join(self.tmp, f'extra-{time.monotonic_ns()}.conf')
            with open(path, 'w') as f:
                f.write(extra)
            cmd += ['--config-file', path]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert 'Traceback' not in out.stderr, out.stderr
        return out

    def boot(self, name, extra_specs, extra=None, xml_out=None):
        flavor = os.path.join(self.tmp, f"{name.replace('/', '_')}.json")
        with open(flavor, 'w') as f:
            json.dump({'name': 'f-' + name, 'vcpus': 1, 'ram': 512, 'disk': 0,
                       'extra_specs': extra_specs}, f)
        args = ['boot', '--flavor', flavor, '--name', name, '-f', 'json']
        if xml_out:
            args += ['--xml-out', xml_out]
        return self.compute(*args, extra=extra)

    def profile(self, name, groups):
        r = self.api.post('/v2/device_profiles', json=[{'name': name, 'groups': groups}])
        assert r.status_code == 201, r.text

    def root(self):
        return self.placement.get('/resource_providers', params={'name': HOST}).json()[
            'resource_providers'][0]['uuid']

    def providers(self):
        rps = self.placement.get('/resource_providers',
                                 params={'in_tree': self.root()}).json()
        return {rp['name']: rp['uuid'] for rp in rps['resource_providers']}

    def rp_named(self, suffix):
        return next(u for n, u in self.providers().items() if n.endswith(suffix))

    def arqs(self):
        return self.api.get('/v2/accelerator_requests', headers=A2_4).json()['arqs']

    def device(self, type_):
        return next(d for d in self.api.get('/v2/devices').json()['devices']
                    if d['type'] == type_)

    def snapshot(self):
        """What a boot + delete must leave as it found it. The root's Nova
        inventory and OWNER_NOVA, added by the first boot, are meant to stay."""
        root = self.root()
        placement = {}
        for name, rp in sorted(self.providers().items()):
            usages = self.placement.get(f'/resource_providers/{rp}/usages').json()['usages']
            entry = {'usages': {rc: n for rc, n in usages.items() if n}}
            if rp != root:
                inv = self.placement.get(f'/resource_providers/{rp}/inventories').json()
                entry['inventory'] = {rc: (i['total'], i['reserved'])
                                      for rc, i in inv['inventories'].items()}
            placement[name] = entry
        db = sqlite3.connect(f"file:{self.st.state_path}/steward.sqlite?mode=ro", uri=True)
        try:
            devices = sorted(db.execute('SELECT uuid, device_state, status FROM devices'))
            in_use = db.execute('SELECT count(*) FROM attach_handles WHERE in_use')\
                .fetchone()[0]
        finally:
            db.close()
        return {'arqs': sorted((a['uuid'], a['state']) for a in self.arqs()),
                'placement': placement, 'devices': devices, 'handles_in_use': in_use,
                'project_usages': self.placement.get(
                    '/usages', params={'project_id': 'steward-compute'}).json()}

    def allocations(self, instance):
        return self.placement.get(f'/allocations/{instance}').json()['allocations']


@pytest.fixture(scope='module')
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('compute')
    sysfs = tmp / 'sys'
    make_sriov(sysfs, PF, '0x10de', '0x2236', [UNMANAGED, MANAGED],
               vf_product='0x25b6', vf_driver='vfio-pci')
    tree = MdevTree(sysfs)
    tree.add_pci_parent(GVT, I915_TYPES)
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    extra = (f'[DEFAULT]\nsysfs_root = {sysfs}\n'
             f'[agent]\nenabled_drivers = fake,pci,mdev\n'
             f'[pci]\ndevice_spec = {{"address": "{UNMANAGED}", "managed": false}}\n'
             f'device_spec = {{"address": "{MANAGED}"}}\n'
             f'[mdev]\ndevice_spec = {{"address": "mtty", "mdev_type": "mtty-2", '
             f'"max_instances": 2}}\n'
             f'device_spec = {{"address": "{GVT}", "mdev_type": "i915-GVTg_V5_4", '
             f'"max_instances": 2}}\n'
             f'[compute]\nevents_listen = 127.0.0.1:{free_port()}\n'
             f'arq_binding_timeout = 30\nmdev_backend = sysfs\n')
    with running_stack(extra_conf=extra) as st:
        e = Env(st, tree, str(tmp))
        deadline = time.monotonic() + 60
        wanted = {'FPGA', PCI_RC, MTTY_RC, GVT_RC}
        while True:
            have = set()
            for rp in e.providers().values():
                have |= set(e.placement.get(
                    f'/resource_providers/{rp}/inventories').json()['inventories'])
            if wanted <= have:
                break
            assert time.monotonic() < deadline, (have, st.log()[-3000:])
            time.sleep(0.2)
        e.profile('dp-fake', [{'resources:FPGA': '1',
                               'trait:CUSTOM_FAKE_DEVICE': 'required'}])
        yield e


def parse(xml):
    return etree.fromstring(xml.encode(), etree.XMLParser(remove_blank_text=True))


def assert_valid_domain(xml):
    if os.path.exists(DOMAIN_RNG):
        rng = etree.RelaxNG(etree.parse(DOMAIN_RNG))
        assert rng.validate(parse(xml)), rng.error_log
    else:
        requirements.degraded('libvirt', f'{DOMAIN_RNG} not installed: domain XML '
                                         'not validated against the schema')
    if not shutil.which('virsh'):
        requirements.degraded('libvirt', 'virsh not installed: domain XML not defined')
    else:
        path = f'/tmp/steward-e2e-{os.getpid()}.xml'
        with open(path, 'w') as f:
            f.write(xml)
        out = subprocess.run(['virsh', '-c', 'test:///default', f'define --validate {path}'],
                             capture_output=True, text=True)
        os.unlink(path)
        assert out.returncode == 0, out.stderr


# -- the fake driver: TEST_PCI handles -----------------------------------------------
def test_fake_driver_boot_list_delete(env):
    before = env.snapshot()
    out = env.boot('vm-fake', {'accel:device_profile': 'dp-fake'})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    inst = doc['uuid']
    (arq,) = doc['bound_arqs']
    assert (arq['state'], arq['attach_handle_type'], arq['instance_uuid'],
            arq['hostname']) == ('Bound', 'TEST_PCI', inst, HOST)
    fake_rp = env.rp_named('_FakeDevice')
    assert arq['device_rp_uuid'] == fake_rp
    assert doc['mappings']['_DEVICE_PROFILE_0'] == [fake_rp]
    # TEST_PCI is ignored in the XML, with one log line naming the type.
    assert parse(doc['domain_xml']).findall('./devices/hostdev') == []
    assert_valid_domain(doc['domain_xml'])
    assert out.stderr.count('unsupported types: TEST_PCI') == 1
    allocations = env.allocations(inst)
    assert allocations[fake_rp]['resources'] == {'FPGA': 1}
    assert allocations[env.root()]['resources'] == {'VCPU': 1, 'MEMORY_MB': 512}
    assert [a['uuid'] for a in env.arqs() if a['instance_uuid'] == inst] == [arq['uuid']]
    listed = env.compute('list')
    assert listed.returncode == 0 and 'vm-fake' in listed.stdout and 'active' in listed.stdout

    out = env.compute('delete', 'vm-fake')
    assert out.returncode == 0, out.stderr
    assert f'Deleted instance vm-fake ({inst})' in out.stdout
    assert env.allocations(inst) == {}
    assert env.snapshot() == before
    assert 'vm-fake' not in env.compute('list').stdout


def test_flavor_without_device_profile(env):
    before = env.snapshot()
    out = env.boot('vm-plain', {})
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc['bound_arqs'] == [] and list(doc['allocations']) == [env.root()]
    assert_valid_domain(doc['domain_xml'])
    assert env.compute('delete', doc['uuid']).returncode == 0     # by UUID
    assert env.snapshot() == before


# -- the pci and mdev drivers: PCI and MDEV handles -------------------------------------
def test_pci_and_mdev_boot_delete(env, tmp_path):
    env.profile('dp-mixed', [{f'resources:{PCI_RC}': '1'}, {f'resources:{PCI_RC}': '1'},
                             {f'resources:{MTTY_RC}': '1'}, {f'resources:{GVT_RC}': '1'}])
    before = env.snapshot()
    xml_out = str(tmp_path / 'vm-mixed.xml')
    nova_spec = f'[compute]\nnova_pci_device_spec = {{"address": "{MANAGED}"}}\n'
    out = env.boot('vm-mixed', {'accel:device_profile': 'dp-mixed',
                                'group_policy': 'isolate'}, extra=nova_spec,
                   xml_out=xml_out)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    arqs = {a['attach_handle_type']: [] for a in doc['bound_arqs']}
    for a in doc['bound_arqs']:
        arqs[a['attach_handle_type']].append(a)
    assert sorted(arqs) == ['MDEV', 'PCI'] and len(arqs['PCI']) == len(arqs['MDEV']) == 2
    with open(xml_out) as f:
        xml = f.read()
    assert xml == doc['domain_xml']
    assert_valid_domain(xml)
    hostdevs = parse(xml).findall('./devices/hostdev')
    mdev_uuids = {a['attach_handle_info']['asked_type']: a['attach_handle_uuid']
                  for a in arqs['MDEV']}
    assert [h.get('type') for h in hostdevs] == ['mdev', 'mdev', 'pci', 'pci']
    assert {h.find('source/address').get('uuid') for h in hostdevs[:2]} == \
        set(mdev_uuids.values())
    managed = {h.find('source/address').get('function'): h.get('managed')
               for h in hostdevs[2:]}
    assert managed == {'0x4': 'no', '0x5': 'yes'}
    assert {h.find('source/address').get('bus') for h in hostdevs[2:]} == {'0x25'}
    # The mdevs were created (sysfs backend) before the domain, with the handles' uuids.
    assert (env.tree.type_dir('mtty', 'mtty-2') / 'create').read_text() == \
        mdev_uuids['mtty-2']
    assert (env.tree.type_dir(GVT, 'i915-GVTg_V5_4') / 'create').read_text() == \
        mdev_uuids['i915-GVTg_V5_4']
    assert sorted((m['parent'], m['type']) for m in doc['mdevs']) == [
        (GVT, 'i915-GVTg_V5_4'), ('mtty', 'mtty-2')]
    # Spec 5: the device Nova's own device_spec also lists gets a warning.
    assert [c[1] for c in doc['nova_device_conflicts']] == [MANAGED]
    assert f"Device {MANAGED}" in out.stderr and "Nova's PCI device_spec" in out.stderr
    # Single-accelerator PCI devices are reserved whole while bound.
    for vf in (UNMANAGED, MANAGED):
        rp = env.rp_named(vf)
        inv = env.placement.get(f'/resource_providers/{rp}/inventories').json()
        assert inv['inventories'][PCI_RC]['reserved'] == 1

    # Play the kernel: `create` made the mdevs.
    for type_id, parent in (('mtty-2', 'mtty'), ('i915-GVTg_V5_4', GVT)):
        env.tree.create_instance(parent, type_id, mdev_uuids[type_id])
    out = env.compute('delete', 'vm-mixed')
    assert out.returncode == 0, out.stderr
    for type_id, parent in (('mtty-2', 'mtty'), ('i915-GVTg_V5_4', GVT)):
        uuid = mdev_uuids[type_id]
        assert (env.tree.parents[parent] / uuid / 'remove').read_text() == '1'
        env.tree.remove_instance(parent, type_id, uuid)       # the kernel again
    assert env.snapshot() == before


# -- failures after the claim leave nothing behind ----------------------------------------
def test_bind_of_more_handles_than_exist_is_undone(env):
    """Placement believes the VF has 2 units (a stale inventory); Steward has one
    handle: the claim succeeds, the bind fails, and everything is undone."""
    rp = env.rp_named(UNMANAGED)
    inv = env.placement.get(f'/resource_providers/{rp}/inventories').json()
    record = dict(inv['inventories'][PCI_RC], total=2, max_unit=2,
                  resource_provider_generation=inv['resource_provider_generation'])
    assert env.placement.put(f'/resource_providers/{rp}/inventories/{PCI_RC}',
                             json=record).status_code == 200
    env.profile('dp-two', [{f'resources:{PCI_RC}': '2'}])
    try:
        before = env.snapshot()
        out = env.boot('vm-two', {'accel:device_profile': 'dp-two'})
        assert out.returncode == 1, out.stdout + out.stderr
        assert 'cyb.compute.bind_failed' in out.stderr
        # The second ARQ finds the single-function device already taken.
        assert '(cyb.bind.device_not_available)' in out.stderr
        assert env.snapshot() == before
        assert 'vm-two' not in env.compute('list').stdout
    finally:
        inv = env.placement.get(f'/resource_providers/{rp}/inventories').json()
        record = dict(inv['inventories'][PCI_RC], total=1, max_unit=1,
                      resource_provider_generation=inv['resource_provider_generation'])
        env.placement.put(f'/resource_providers/{rp}/inventories/{PCI_RC}', json=record)


def test_device_disabled_after_scheduling_is_undone(env):
    """The device is disabled between the scheduler's look at Placement and the
    bind (Placement's reserved put back to 0 plays the stale view)."""
    device = env.device('FPGA')
    assert env.api.post(f"/v2/devices/{device['uuid']}/disable").status_code == 200
    rp = env.rp_named('_FakeDevice')
    try:
        inv = env.placement.get(f'/resource_providers/{rp}/inventories').json()
        assert inv['inventories']['FPGA']['reserved'] == 16
        record = dict(inv['inventories']['FPGA'], reserved=0,
                      resource_provider_generation=inv['resource_provider_generation'])
        assert env.placement.put(f'/resource_providers/{rp}/inventories/FPGA',
                                 json=record).status_code == 200
        before = env.snapshot()
        out = env.boot('vm-disabled', {'accel:device_profile': 'dp-fake'})
        assert out.returncode == 1, out.stdout + out.stderr
        assert 'cyb.bind.device_maintaining' in out.stderr
        assert env.snapshot() == before
    finally:
        assert env.api.post(f"/v2/devices/{device['uuid']}/enable").status_code == 200


def test_a_lost_event_does_not_stall_a_bound_boot(env):
    """This boot listens elsewhere than where `steward serve` sends its events, so
    its event is lost. Like Nova, the boot asks first whether its ARQs are already
    resolved: they are (Steward binds synchronously), so nothing is awaited."""
    extra = (f'[compute]\nevents_listen = 127.0.0.1:{free_port()}\n'
             f'arq_binding_timeout = 30\n')
    start = time.monotonic()
    out = env.boot('vm-noevent', {'accel:device_profile': 'dp-fake'}, extra=extra)
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - start < 30
    assert 'vm-noevent' in env.compute('list').stdout
    assert env.compute('delete', 'vm-noevent').returncode == 0


# -- OWNER_NOVA: Cyborg's groups never use a Nova-owned device -----------------------------
def test_device_profile_never_lands_on_a_nova_owned_provider(env):
    nova_rp = '6c1a3c0e-6f4b-4a77-9b5c-0a0d4b6d2e01'
    r = env.placement.post('/resource_providers', json={
        'name': f'{HOST}_nova_fpga', 'uuid': nova_rp, 'parent_provider_uuid': env.root()})
    assert r.status_code == 200, r.text
    env.placement.put(f'/resource_providers/{nova_rp}/traits', json={
        'resource_provider_generation': 0, 'traits': ['OWNER_NOVA', 'CUSTOM_FAKE_DEVICE']})
    env.placement.put(f'/resource_providers/{nova_rp}/inventories', json={
        'resource_provider_generation': 1, 'inventories': {'FPGA': {'total': 4}}})
    device = env.device('FPGA')
    try:
        before = env.snapshot()
        # With Steward's device out of service, the free Nova-owned FPGA is no host.
        assert env.api.post(f"/v2/devices/{device['uuid']}/disable").status_code == 200
        out = env.boot('vm-owner', {'accel:device_profile': 'dp-fake'})
        assert out.returncode == 3, out.stdout + out.stderr
        assert 'cyb.compute.no_valid_host' in out.stderr
        assert env.api.post(f"/v2/devices/{device['uuid']}/enable").status_code == 200
        out = env.boot('vm-owner', {'accel:device_profile': 'dp-fake'})
        assert out.returncode == 0, out.stderr
        assert nova_rp not in json.loads(out.stdout)['allocations']
        assert env.compute('delete', 'vm-owner').returncode == 0
        assert env.snapshot() == before
    finally:
        env.api.post(f"/v2/devices/{device['uuid']}/enable")
        env.placement.delete(f'/resource_providers/{nova_rp}')


# -- usage errors: exit 2, nothing done, no traceback ---------------------------------------
def test_usage_errors(env, tmp_path):
    before = env.snapshot()
    missing = env.compute('boot', '--flavor', str(tmp_path / 'none.json'), '--name', 'x')
    assert missing.returncode == 2 and 'cannot read' in missing.stderr
    bad = tmp_path / 'bad.json'
    bad.write_text('{"name": ')
    assert env.compute('boot', '--flavor', str(bad), '--name', 'x').returncode == 2
    out = env.boot('x', {'accel:device_profile': 'no-such-dp'})
    assert out.returncode == 2 and 'no such device profile' in out.stderr
    out = env.boot('bad/name', {})
    assert out.returncode == 2 and 'cyb.compute.instance_name_invalid' in out.stderr
    out = env.compute('delete', 'nobody')
    assert out.returncode == 2 and 'No instance nobody' in out.stderr
    out = env.compute('boot', '--name', 'x')
    assert out.returncode == 2 and '--flavor' in out.stderr
    assert env.boot('vm-dup', {}).returncode == 0
    try:
        out = env.boot('vm-dup', {})
        assert out.returncode == 2 and 'already exists' in out.stderr
    finally:
        assert env.compute('delete', 'vm-dup').returncode == 0
    assert env.snapshot() == before


# -- a boot stopped while it waits --------------------------------------------------------
@contextlib.contextmanager
def waiting_boot(env, name):
    """A boot held half-way, its claim made and its ARQ Bound: the mdev type's
    ``create`` is a FIFO nobody reads, so the mdev step's write blocks (a slow
    kernel driver)."""
    if not any(p['name'] == 'dp-mtty-held' for p in
               env.api.get('/v2/device_profiles').json()['device_profiles']):
        env.profile('dp-mtty-held', [{f'resources:{MTTY_RC}': '1'}])
    create = env.tree.type_dir('mtty', 'mtty-2') / 'create'
    saved = create.read_bytes()
    create.unlink()
    os.mkfifo(create)
    flavor = os.path.join(env.tmp, f'{name}.json')
    with open(flavor, 'w') as f:
        json.dump({'name': 'f', 'vcpus': 1, 'ram': 512,
                   'extra_specs': {'accel:device_profile': 'dp-mtty-held'}}, f)
    proc = subprocess.Popen([STEWARD, 'compute', 'boot', '--flavor', flavor, '--name',
                             name, '--config-file', env.conf],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not any(a['state'] == 'Bound' for a in env.arqs()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        create.unlink()
        create.write_bytes(saved)


def test_sigterm_during_the_boot_undoes_it(env):
    before = env.snapshot()
    with waiting_boot(env, 'vm-term') as proc:
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert 'Traceback' not in stderr
    assert env.snapshot() == before
    assert 'vm-term' not in env.compute('list').stdout


def test_killed_boot_is_cleaned_up_by_delete(env):
    before = env.snapshot()
    with waiting_boot(env, 'vm-kill') as proc:
        busy = env.compute('delete', 'vm-kill')
        assert busy.returncode == 1 and 'cyb.compute.instance_busy' in busy.stderr
        proc.kill()
        proc.communicate(timeout=30)
    listed = env.compute('list')
    assert 'vm-kill' in listed.stdout and 'building' in listed.stdout
    assert env.snapshot() != before            # the claim and the bound ARQ are left
    out = env.compute('delete', 'vm-kill')
    assert out.returncode == 0, out.stderr
    assert env.snapshot() == before

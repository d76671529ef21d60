"""Never hand out a failing device (issue 38), end to end: each condition made to
happen on the simulated hardware (the NVMe simulator's SMART log page under the
real nvme-cli, the AER counters of a sysfs-shaped tree under the real pci driver),
the real conductor and agent, the real Placement, the API at 2.8.

What each test proves: within one discovery the device leaves Placement's free
capacity and binds are refused; a tenant that holds it keeps it; its cleanup still
runs and it stays out afterwards; history, last_error, the metric and the API say
why; an operator's POST /clean brings it back once the condition has cleared and
not before.
"""
import json
import os
import uuid

from prometheus_client import parser
import pytest

from steward.drivers.pci.driver import PciDriver
from tests.fixtures import placement_fixture
from tests.fixtures.sysfs_tree import make_pci, write_aer
from tests.functional import lifecycle_stack
from tests.functional import nvme_stack
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)
from tests.functional.nvme_stack import TENANT, nvme  # noqa: F401 (fixture)

V28 = {'OpenStack-API-Version': 'accelerator 2.8'}
V27 = {'OpenStack-API-Version': 'accelerator 2.7'}
MiB = 2 ** 20


def show(st, dev_uuid, headers=V28):
    r = st.api.get(f'/v2/devices/{dev_uuid}', headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def steps(st, dev_uuid):
    r = st.api.get(f'/v2/devices/{dev_uuid}/history', headers=V28)
    assert r.status_code == 200, r.text
    return [(h['source_state'], h['event'], h['target_state'], h['reason'])
            for h in r.json()['history']]


def samples(st, name):
    text = st.metrics.render().decode()
    return [s for fam in parser.text_string_to_metric_families(text)
            for s in fam.samples if s.name == name]


def arq_state(st, arq):
    r = st.api.get(f'/v2/accelerator_requests/{arq}')
    assert r.status_code == 200, r.text
    return r.json()['state']


def assert_out_of_service(st, dev, code):
    """Reserved whole in Placement, refused by Placement and by Cyborg's bind guard."""
    rp = st.deployable(dev)['rp_uuid']
    inv = st.inventory(rp)
    assert inv['reserved'] == inv['total'] == 1
    inst, arq, alloc, bind = st.bind(dev, profile=f'again-{uuid.uuid4().hex[:6]}')
    assert alloc.status_code == 409, alloc.text          # no capacity left
    assert bind.status_code == 409, bind.text
    assert bind.json()['error_code'] == code
    st.api.delete(f'/v2/accelerator_requests/{arq}')


# --- NVMe: each condition of the SMART log, on a free drive ----------------------------
@pytest.mark.parametrize('change,code', [
    (dict(available_spare=4), 'nvme.critical_warning.spare'),
    (dict(available_spare=4), 'nvme.spare_below_threshold'),
    (dict(temperature_k=350), 'nvme.critical_warning.temperature'),
    (dict(extra_warning=0x04), 'nvme.critical_warning.reliability'),
    (dict(extra_warning=0x08), 'nvme.critical_warning.read_only'),
    (dict(extra_warning=0x10), 'nvme.critical_warning.volatile_backup'),
    (dict(extra_warning=0x20), 'nvme.critical_warning.pmr_read_only'),
    (dict(media_errors=2), 'nvme.media_errors'),
])
def test_a_free_drive_read_unhealthy_leaves_service_within_one_discovery(
        nvme, conf, change, code):
    conf.set_override('nvme_media_errors_unhealthy', 1, group='health')
    ctrl = nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    got = show(st, dev['uuid'])
    assert got['health']['state'] == 'ok' and got['health']['fault'] is None
    assert got['health']['read_at']
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0

    ctrl.set_health(**change)
    st.discover()                                      # one discovery interval

    got = show(st, dev['uuid'])
    assert got['device_state'] == 'error'
    assert got['health']['state'] == 'unhealthy'
    assert code in [c['code'] for c in got['health']['conditions']]
    assert code in got['health']['fault']
    assert got['last_error'].startswith('unhealthy: ') and code in got['last_error']
    assert steps(st, dev['uuid'])[-1][:3] == ('available', 'unhealthy', 'error')
    assert_out_of_service(st, dev, 'cyb.bind.device_unhealthy')
    cond = [s for s in samples(st, 'steward_device_health_condition')
            if s.labels['device'] == dev['uuid'] and s.labels['code'] == code]
    assert cond and cond[0].labels['severity'] == 'unhealthy' and cond[0].value == 1
    faults = [s for s in samples(st, 'steward_device_health_fault')
              if s.labels['device'] == dev['uuid']]
    assert faults and faults[0].labels['state'] == 'error'
    # GET /v2/devices filters on it
    r = st.api.get('/v2/devices?health=unhealthy', headers=V28)
    assert [d['uuid'] for d in r.json()['devices']] == [dev['uuid']]
    assert st.api.get('/v2/devices?health=ok', headers=V28).json()['devices'] == []


# --- NVMe: the whole story under a tenant --------------------------------------------------
def test_a_drive_failing_under_its_tenant_is_cleaned_and_kept_out_until_replaced(nvme):
    ctrl = nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    inst, arq, alloc, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    ctrl.write(0, TENANT)
    told_nova = list(st.conductor.notifier.events)       # the bind's 'completed'

    ctrl.set_health(available_spare=3)
    st.discover()
    got = show(st, dev['uuid'])
    # The tenant keeps its device: still allocated, its ARQ still bound, and
    # Nova is told nothing.
    assert got['device_state'] == 'allocated'
    assert arq_state(st, arq) == 'Bound'
    assert st.conductor.notifier.events == told_nova
    assert got['health']['fault'] and 'nvme.critical_warning.spare' in got['health']['fault']
    assert got['last_error'].startswith('unhealthy: ')
    assert steps(st, dev['uuid'])[-1][:3] == ('allocated', 'unhealthy', 'allocated')
    # The operator sees which instance holds the failing drive: in the API (the
    # ARQs bound on its provider), never in the scrape, which names no tenant's.
    rp = st.deployable(dev)['rp_uuid']
    held = {a['instance_uuid'] for a in st.api.get('/v2/accelerator_requests').json()['arqs']
            if a['device_rp_uuid'] == rp and a['state'] == 'Bound'}
    assert held == {inst}
    assert all(set(s.labels) == {'device', 'type', 'host', 'code', 'severity'}
               for s in samples(st, 'steward_device_health_condition'))

    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    # Cleaned all the same, and the erase record says the drive was unhealthy.
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)
    rec = st.records(dev['uuid'])[0]
    assert rec['status'] == 'succeeded' and rec['verification'] == 'passed'
    details = rec['details'] if isinstance(rec['details'], dict) else json.loads(rec['details'])
    assert 'nvme.critical_warning.spare' in details['device_unhealthy']
    assert details['health_after']['state'] == 'unhealthy'
    assert steps(st, dev['uuid'])[-1][:3] == ('cleaning', 'unhealthy', 'error')
    assert_out_of_service(st, dev, 'cyb.bind.device_unhealthy')

    # The operator cannot bring it back while the drive still reports it.
    r = st.clean(dev['uuid'])
    assert r.status_code == 409, r.text
    assert r.json()['error_code'] == 'cyb.device.still_unhealthy'

    ctrl.set_health(available_spare=100)        # replaced / reset
    st.discover()
    got = show(st, dev['uuid'])
    # Cleared, but out of service until the operator acts.
    assert got['health']['state'] == 'ok' and got['health']['fault']
    assert got['device_state'] == 'error'
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 1

    r = st.clean(dev['uuid'])
    assert r.status_code == 202, r.text
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    got = show(st, dev['uuid'])
    assert got['health']['fault'] is None and got['last_error'] is None
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0
    assert st.records(dev['uuid'])[0]['trigger'] == 'operator'


def test_the_smart_log_is_read_after_every_cleanup(nvme):
    """A drive that fails between two discoveries is caught by the read that
    follows its cleanup: it goes to error, not to the next tenant."""
    ctrl = nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    inst, arq, alloc, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    ctrl.set_health(extra_warning=0x08)          # no discovery runs before the release
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    got = show(st, dev['uuid'])
    assert 'nvme.critical_warning.read_only' in got['health']['fault']
    assert steps(st, dev['uuid'])[-1][:3] == ('cleaning', 'unhealthy', 'error')


def test_a_worn_drive_warns_and_stays_in_service(nvme):
    ctrl = nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    ctrl.set_health(percent_used=95)
    st.discover()
    got = show(st, dev['uuid'])
    assert got['device_state'] == 'available'
    assert got['health']['state'] == 'warning' and got['health']['fault'] is None
    assert [c['code'] for c in got['health']['conditions']] == ['nvme.percentage_used']
    assert steps(st, dev['uuid'])[-1][:3] == ('available', 'health_warning', 'available')
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0
    assert [s.labels['severity'] for s in samples(st, 'steward_device_health_condition')
            if s.labels['device'] == dev['uuid']] == ['warning']
    inst, arq, alloc, bind = st.bind(dev)
    assert alloc.status_code == 204 and bind.status_code == 202, bind.text


def test_a_drive_that_says_it_is_fine_but_does_not_erase_is_caught_by_verification(nvme):
    ctrl = nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2,
                                   lie_sanitize=True)
    ctrl.set_health(extra_warning=0x08, available_spare=2, lie=True)
    st = nvme.start()
    dev = st.device()
    assert show(st, dev['uuid'])['health']['state'] == 'ok'      # the lie
    inst, arq, alloc, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    ctrl.write(0, TENANT)
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    rec = st.records(dev['uuid'])[0]
    assert rec['status'] == 'failed' and rec['verification'] == 'failed', rec
    assert show(st, dev['uuid'])['health']['fault'] is None   # the page still lies
    assert_out_of_service(st, dev, 'cyb.bind.device_not_available')


def test_health_is_absent_below_2_8_and_its_filter_is_checked(nvme):
    nvme.sim.add_controller(namespaces=[16 * MiB])
    st = nvme.start()
    dev = st.device()
    assert 'health' not in show(st, dev['uuid'], headers=V27)
    assert all('health' not in d for d in st.api.get('/v2/devices', headers=V27)
               .json()['devices'])
    r = st.api.get('/v2/devices?health=ok', headers=V27)
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_query'
    r = st.api.get('/v2/devices?health=sick', headers=V28)
    assert r.status_code == 400
    assert r.json()['error_code'] == 'cyb.request.invalid_parameter'
    r = st.api.get('/v2/devices?health=ok', headers=V28)
    assert [d['uuid'] for d in r.json()['devices']] == [dev['uuid']]


# --- PCI: the kernel's AER counters -------------------------------------------------------
PCI_ADDR = '0000:0a:00.0'
PCI_RC = lifecycle_stack.RC       # the stack's profile asks for it


@pytest.fixture
def pci_host(life, conf, tmp_path):
    root = tmp_path / 'sys'
    path = make_pci(root, PCI_ADDR, '0x8086', '0x0d58', driver='vfio-pci')
    write_aer(path)
    conf.set_override('sysfs_root', str(root))
    conf.set_override('device_spec', [json.dumps({'vendor_id': '8086',
                                                  'resource_class': PCI_RC})],
                      group='pci')
    st = lifecycle_stack.LifeStack(conf, life.host, PciDriver(conf, life.host),
                                   life.database, life.transport)
    life.stacks.append(st)
    st.start_agent()
    return st, path


def pci_show(st, dev_uuid):
    r = st.api.get(f'/v2/devices/{dev_uuid}', headers=V28)
    assert r.status_code == 200, r.text
    return r.json()


def test_fatal_aer_errors_take_a_free_function_out(pci_host):
    st, path = pci_host
    dev = st.device()
    assert pci_show(st, dev['uuid'])['health']['state'] == 'ok'
    write_aer(path, fatal={'Surprise Down Error': 1})
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'error'
    assert 'pci.aer_fatal' in got['health']['fault']
    rp = st.deployable(dev)['rp_uuid']
    inv = st.inventory(rp)
    assert inv['reserved'] == inv['total'] == 1
    with placement_fixture.admin_session(st.placement_url) as s:
        r = s.put(f'/allocations/{uuid.uuid4()}', json={
            'allocations': {rp: {'resources': {PCI_RC: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    assert r.status_code == 409, r.text


def test_a_function_failing_under_its_tenant_leaves_service_at_release(pci_host):
    st, path = pci_host
    dev = st.device()
    inst, arq = st.bind(dev)
    told_nova = list(st.conductor.notifier.events)
    write_aer(path, fatal={'Completion Timeout': 2})
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'allocated'
    assert arq_state(st, arq) == 'Bound'
    assert st.conductor.notifier.events == told_nova
    assert got['health']['fault'] and got['last_error'].startswith('unhealthy: ')

    st.release(inst)
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'error'
    assert steps(st, dev['uuid'])[-1][:3] == ('allocated', 'release_unhealthy', 'error')
    rp = st.deployable(dev)['rp_uuid']
    assert st.inventory(rp)['reserved'] == 1

    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V28)
    assert r.status_code == 409, r.text
    assert r.json()['error_code'] == 'cyb.device.still_unhealthy'

    # The function re-enumerated (remove + rescan): the kernel's counters start at 0.
    write_aer(path)
    st.discover()
    assert pci_show(st, dev['uuid'])['device_state'] == 'error'     # not by itself
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V28)
    assert r.status_code == 202, r.text
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'available' and got['health']['fault'] is None
    assert steps(st, dev['uuid'])[-1][:3] == ('error', 'operator_clean', 'available')
    assert st.inventory(rp)['reserved'] == 0
    st.bind(dev, profile='after')                # handed out again


# --- A device of several accelerators (the fake driver's FPGA, like an mdev parent) ----
def _bind_fpga(st, dev, rc='FPGA'):
    """Nova's allocation of one accelerator, then the bind; (instance, arq, alloc,
    bind answer)."""
    dep = st.deployable(dev)
    names = [p['name'] for p in st.api.get('/v2/device_profiles').json()['device_profiles']]
    if 'fpga' not in names:
        r = st.api.post('/v2/device_profiles', json=[
            {'name': 'fpga', 'groups': [{f'resources:{rc}': '1'}]}])
        assert r.status_code == 201, r.text
    inst = str(uuid.uuid4())
    arq = st.api.post('/v2/accelerator_requests',
                      json={'device_profile_name': 'fpga'}).json()['arqs'][0]['uuid']
    with placement_fixture.admin_session(st.placement_url) as s:
        alloc = s.put(f'/allocations/{inst}', json={
            'allocations': {dep['rp_uuid']: {'resources': {rc: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    r = st.api.patch('/v2/accelerator_requests', json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': st.host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
    return inst, arq, alloc, r


def test_a_shared_device_told_unhealthy_hands_out_none_of_its_accelerators(
        life, conf, tmp_path):
    from steward.drivers.fake import FakeDriver
    told = tmp_path / 'fake-health.json'
    conf.set_override('fake_health_file', str(told), group='health')
    st = lifecycle_stack.LifeStack(conf, life.host, FakeDriver(conf, life.host),
                                   life.database, life.transport)
    life.stacks.append(st)
    st.start_agent()
    dev = st.device()
    rp = st.deployable(dev)['rp_uuid']
    inst, arq, alloc, bind = _bind_fpga(st, dev)
    assert bind.status_code == 202, bind.text
    assert st.inventory(rp, rc='FPGA')['reserved'] == 0     # 15 others still free

    told.write_text(json.dumps({'state': 'unhealthy', 'detail': 'demo fault'}))
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'allocated' and 'fake.told' in got['health']['fault']
    assert arq_state(st, arq) == 'Bound'
    inv = st.inventory(rp, rc='FPGA')
    assert inv['reserved'] == inv['total'] == 16            # none of the 15 others
    _, arq2, alloc2, bind2 = _bind_fpga(st, dev)
    assert alloc2.status_code == 409, alloc2.text
    assert bind2.status_code == 409 and \
        bind2.json()['error_code'] == 'cyb.bind.device_unhealthy', bind2.text

    st.release(inst)
    assert pci_show(st, dev['uuid'])['device_state'] == 'error'
    told.write_text(json.dumps({'state': 'ok'}))
    st.discover()
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V28)
    assert r.status_code == 202, r.text
    assert pci_show(st, dev['uuid'])['device_state'] == 'available'
    assert st.inventory(rp, rc='FPGA')['reserved'] == 0


# --- "last read" on quiet cycles --------------------------------------------------------
def test_quiet_cycles_keep_last_read_current_without_a_diff(life, conf):
    """A report unchanged but for its readings' time is no change (no diff, no
    Placement write), yet the device's read_at follows, at most every [health]
    read_at_refresh seconds (0 here: every quiet cycle whose reading is newer)."""
    import time
    from steward.drivers.fake import FakeDriver
    conf.set_override('read_at_refresh', 0, group='health')
    st = lifecycle_stack.LifeStack(conf, life.host, FakeDriver(conf, life.host),
                                   life.database, life.transport)
    life.stacks.append(st)
    st.start_agent()
    dev = st.device()
    first = pci_show(st, dev['uuid'])['health']['read_at']
    history = steps(st, dev['uuid'])
    deadline = time.monotonic() + 30        # a bound on a condition, not a wait
    while True:
        result = st.agent.run_cycle()
        assert result['changed'] is False, result
        now = pci_show(st, dev['uuid'])['health']['read_at']
        if now != first:
            break
        assert time.monotonic() < deadline, 'read_at never refreshed'
        time.sleep(0.2)
    assert now > first
    assert steps(st, dev['uuid']) == history


@pytest.mark.parametrize('change,code', [
    (lambda path: write_aer(path, nonfatal={'Poisoned TLP': 1}), 'pci.aer_nonfatal'),
    (lambda path: write_aer(path, correctable={'Bad TLP': 3}), 'pci.aer_correctable'),
    (lambda path: os.unlink(path / 'driver'), 'pci.driver_unbound'),
])
def test_pci_warnings_are_visible_and_keep_the_function_in_service(pci_host, change, code):
    st, path = pci_host
    dev = st.device()
    change(path)
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'available' and got['health']['fault'] is None
    assert got['health']['state'] == 'warning'
    assert [c['code'] for c in got['health']['conditions']] == [code]
    assert steps(st, dev['uuid'])[-1][:3] == ('available', 'health_warning', 'available')
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0
    st.bind(dev, profile='warned')               # still handed out


# --- mdev parents and GPUs on sysfs-shaped trees --------------------------------------
def _rc(st, dev):
    return next(a for a in json.loads(st.deployable(dev)['attributes_list'])
                if 'rc' in a)['rc']


def test_an_mdev_parent_with_fatal_aer_hands_out_none_of_its_vgpus(life, conf, tmp_path):
    from steward.drivers.mdev.driver import MdevDriver
    from tests.fixtures.mdev_tree import MdevTree
    tree = MdevTree(tmp_path / 'sys')
    parent = '0000:00:02.0'
    path = tree.add_pci_parent(parent, {'i915-GVTg_V5_4': {'available': 4}})
    write_aer(path)
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [json.dumps({'address': parent,
                                                  'mdev_type': 'i915-GVTg_V5_4'})],
                      group='mdev')
    st = lifecycle_stack.LifeStack(conf, life.host, MdevDriver(conf, life.host),
                                   life.database, life.transport)
    life.stacks.append(st)
    st.start_agent()
    dev = st.device()
    rc = _rc(st, dev)
    inst, arq, alloc, bind = _bind_fpga(st, dev, rc=rc)
    assert bind.status_code == 202, bind.text

    write_aer(path, fatal={'Uncorrectable Internal Error': 1})
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'allocated' and 'pci.aer_fatal' in got['health']['fault']
    assert arq_state(st, arq) == 'Bound'                     # its tenant keeps it
    rp = st.deployable(dev)['rp_uuid']
    inv = st.inventory(rp, rc=rc)
    assert inv['reserved'] == inv['total'] == 4              # no other vGPU offered
    _, _, alloc2, bind2 = _bind_fpga(st, dev, rc=rc)
    assert alloc2.status_code == 409 and bind2.status_code == 409, bind2.text


def test_a_critical_xid_takes_a_gpu_out(life, conf, tmp_path):
    from steward.drivers.nvidia_gpu import NvidiaGpuDriver
    root = tmp_path / 'sys'
    path = make_pci(root, '0000:3b:00.0', '0x10de', '0x1eb8', cls='0x030200',
                    driver='nvidia')
    write_aer(path)
    log = tmp_path / 'kern.log'
    log.write_text('')
    conf.set_override('sysfs_root', str(root))
    conf.set_override('gpu_kernel_log', str(log), group='health')
    st = lifecycle_stack.LifeStack(conf, life.host, NvidiaGpuDriver(conf, life.host),
                                   life.database, life.transport)
    life.stacks.append(st)
    st.start_agent()
    dev = st.device()
    with open(log, 'a') as f:
        f.write('[ 812.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=\'<unknown>\', name=<unknown>, '
                'GPU has fallen off the bus.\n')
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['device_state'] == 'error'
    assert 'gpu.xid_critical' in got['health']['fault']
    assert 'fallen off the bus' in got['health']['fault']
    rp = st.deployable(dev)['rp_uuid']
    assert st.inventory(rp, rc='PGPU')['reserved'] == 1
    # The next discovery reads no new Xid: the GPU stays out until the operator
    # (after nvidia-smi -r) brings it back.
    st.discover()
    got = pci_show(st, dev['uuid'])
    assert got['health']['state'] == 'ok' and got['device_state'] == 'error'
    r = st.api.post(f'/v2/devices/{dev["uuid"]}/clean', headers=V28)
    assert r.status_code == 202, r.text
    assert pci_show(st, dev['uuid'])['device_state'] == 'available'
    assert st.inventory(rp, rc='PGPU')['reserved'] == 0


# --- NVMe: nvme-cli 2.11 and 2.12's smart-log (issue 53, item 1) ---------------------------
RECORDED_2_11 = os.path.join(os.path.dirname(__file__), os.pardir, 'unit',
                             'nvme_cli_outputs', '2.11')


def _smart_log_replay(sim, tmp_path):
    """``[nvme] nvme_cli`` that answers ``smart-log`` with the page in ``replay``
    once the test puts one there, and runs the real nvme-cli for everything else:
    what a host with nvme-cli 2.11 reads, on a machine without that binary. The page
    is what the real 2.11 printed over the simulator (nvme_cli_outputs/README.md);
    with the binary itself, STEWARD_TEST_NVME_CLI runs this whole file through it."""
    replay = tmp_path / 'smart-log.json'
    wrapper = tmp_path / 'nvme-2.11-smart-log'
    wrapper.write_text(f'#!/bin/sh\n'
                       f'if [ "$1" = smart-log ] && [ -f {replay} ]; then\n'
                       f'  exec cat {replay}\nfi\n'
                       f'exec {sim.real_nvme_cli} "$@"\n')
    wrapper.chmod(0o755)
    sim.real_nvme_cli = str(wrapper)
    sim.restore_nvme_cli()                  # [nvme] nvme_cli now runs the wrapper
    return replay


@pytest.mark.parametrize('recording,codes', [
    ('smart-log-read-only', {'nvme.critical_warning.read_only'}),
    ('smart-log-spare-low', {'nvme.critical_warning.spare', 'nvme.spare_below_threshold'}),
])
def test_a_drive_read_through_2_11s_smart_log_leaves_service(nvme, tmp_path, recording,
                                                             codes):
    """2.11 and 2.12 print critical_warning as an object: read as a number it made
    the reading 'nvme.smart_unreadable', a warning, and the drive stayed in service."""
    with open(os.path.join(RECORDED_2_11, f'{recording}.stdout')) as f:
        page = f.read()
    assert isinstance(json.loads(page)['critical_warning'], dict)   # 2.11's shape
    replay = _smart_log_replay(nvme.sim, tmp_path)
    nvme.sim.add_controller(namespaces=[16 * MiB], sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    assert show(st, dev['uuid'])['health']['state'] == 'ok'

    replay.write_text(page)                 # the drive now reports it, as 2.11 prints
    st.discover()

    got = show(st, dev['uuid'])
    found = {c['code'] for c in got['health']['conditions']}
    assert found == codes, got['health']
    assert got['device_state'] == 'error' and got['health']['state'] == 'unhealthy'
    assert steps(st, dev['uuid'])[-1][:3] == ('available', 'unhealthy', 'error')
    assert_out_of_service(st, dev, 'cyb.bind.device_unhealthy')

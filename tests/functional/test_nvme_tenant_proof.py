"""Tenant-proof cleanup, tried as an attacker would: the tenant had the whole
controller (PCI passthrough) and issued admin commands of its own through the real
nvme-cli before its instance was deleted; some drives lie. Everything goes through
the public API (bind, release, device state, erase records) and Placement.

For every scenario the device ends either ``available`` with no tenant byte left
anywhere on the controller's media (attached, detached and deleted namespaces,
unallocated capacity: ``Controller.find_on_media``), or ``error`` with Placement
reserved = total and binds refused. Never available with data.
"""
import json

import pytest

from steward.common import states
from tests.functional import nvme_stack
from tests.functional.nvme_stack import TENANT, nvme  # noqa: F401 (fixture)

MiB = 2 ** 20
CAPACITY = 48 * MiB
NEEDLE = TENANT[:64]

CAPS = {
    # The enterprise family of tests/nvme_sim/presets.py (Samsung PM1733's Identify
    # data): the one preset with namespace management, which every scenario here
    # needs; the other actions' families have none (tests/functional/
    # test_nvme_presets.py runs the scenarios that apply to them).
    'sanitize_crypto': dict(preset='enterprise_crypto_block'),
    'sanitize_block': dict(ces=False, bes=True, wzs=True),
    # Format NVM with a secure erase, no sanitize (issue 21's client path), on a
    # controller with namespace management so every namespace game applies.
    'format_crypto': dict(ces=False, bes=False, wzs=True, fna=0x4),
    'format_user_data': dict(ces=False, bes=False, wzs=True, fna=0x0),
    'write_zeroes': dict(ces=False, bes=False, wzs=True, format_nvm=False),
    'shred': dict(ces=False, bes=False, wzs=False, format_nvm=False),
}
ACTIONS = sorted(CAPS)


def _nvme(sim, *args):
    r = sim.nvme(*args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


# A controller that can sanitize (so the tenant can too) whose operator chose zeroing.
ZERO_POLICY = ['{"vendor_id": "8086", "clear_action": "zero"}']


def _start(nvme, action, spec=None, **extra):
    if spec is not None:
        nvme.conf.set_override('device_spec', spec, group='nvme')
        extra = dict(CAPS['sanitize_crypto'], **extra)
    ctrl = nvme.sim.add_controller(**dict(dict(namespaces=[CAPACITY], sanitize_seconds=0.3),
                                          **dict(CAPS[action], **extra)))
    st = nvme.start()
    dev = st.device()
    assert json.loads(dev['std_board_info'])['cleanup_action'] == action
    inst, _, alloc, bind = st.bind(dev)
    assert (alloc.status_code, bind.status_code) == (204, 202), bind.text
    return st, ctrl, dev, inst


def _spray(ctrl, nsid=1):
    """Tenant data at the start, the middle and the end of a namespace."""
    size = next(ns['size'] for ns in ctrl.namespaces() if ns['nsid'] == nsid)
    for off in (0, size // 2, size - 4096):
        ctrl.write(off, TENANT, nsid=nsid)


def _released_clean(st, ctrl, dev, inst):
    """Nova deletes the instance: the device must come back available, reserved 0,
    in the canonical layout, with nothing of the tenant anywhere on the media."""
    assert ctrl.find_on_media(NEEDLE), 'the scenario left no tenant data to find'
    st.release(inst)
    seen = st.wait_state(dev['uuid'], (states.DEV_AVAILABLE, states.DEV_ERROR))
    rec = st.records(dev['uuid'])[0]
    assert seen[-1] == states.DEV_AVAILABLE, rec
    assert ctrl.find_on_media(NEEDLE) == []
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0
    assert [(ns['size'], ns['attached']) for ns in ctrl.namespaces()] == \
        [(CAPACITY, True)]
    assert rec['status'] == 'succeeded' and rec['verification'] == 'passed', rec
    assert rec['details']['layout_after']['unallocated'] == 0
    return rec


def _released_quarantined(st, ctrl, dev, inst, code):
    st.release(inst)
    seen = st.wait_state(dev['uuid'], (states.DEV_AVAILABLE, states.DEV_ERROR))
    rec = st.records(dev['uuid'])[0]
    assert seen[-1] == states.DEV_ERROR, rec
    assert rec['error_code'] == code, rec
    inv = st.inventory(st.deployable(dev)['rp_uuid'])
    assert inv['reserved'] == inv['total'] == 1
    _, arq, alloc, bind = st.bind(dev, profile='next-tenant')
    assert alloc.status_code == 409 and bind.status_code == 409, bind.text
    return rec


# --- what the tenant left ------------------------------------------------------------
@pytest.mark.parametrize('action', ACTIONS)
def test_only_namespace_detached(nvme, action):
    st, ctrl, dev, inst = _start(nvme, action)
    _spray(ctrl)
    _nvme(nvme.sim, 'detach-ns', ctrl.char_path, '-n', '1', '-c', '0')
    assert ctrl.namespace_paths() == []                  # nothing visible to the host
    rec = _released_clean(st, ctrl, dev, inst)
    assert rec['details']['layout_before']['namespaces'] == [
        {'nsid': 1, 'attached': False}]


@pytest.mark.parametrize('action', ACTIONS)
def test_namespace_deleted_and_a_smaller_one_created(nvme, action):
    st, ctrl, dev, inst = _start(nvme, action)
    _spray(ctrl)
    _nvme(nvme.sim, 'delete-ns', ctrl.char_path, '-n', '1')
    out = _nvme(nvme.sim, 'create-ns', ctrl.char_path, '-s', str(8 * MiB // 512), '-c',
                str(8 * MiB // 512), '-f', '0')
    nsid = out.split(':')[-1].strip()
    _nvme(nvme.sim, 'attach-ns', ctrl.char_path, '-n', nsid, '-c', '0')
    # The old blocks are in the new namespace and in the unallocated pool.
    places = {path for path, _ in ctrl.find_on_media(NEEDLE)}
    assert ctrl.free_media_path() in places and len(places) == 2
    rec = _released_clean(st, ctrl, dev, inst)
    before = rec['details']['layout_before']
    assert before['unallocated'] == CAPACITY - 8 * MiB


@pytest.mark.parametrize('action', ACTIONS)
def test_capacity_split_some_detached_mixed_formats(nvme, action):
    st, ctrl, dev, inst = _start(nvme, action)
    _nvme(nvme.sim, 'delete-ns', ctrl.char_path, '-n', '0xffffffff')
    for mib, fmt in ((8, '0'), (16, '1'), (8, '0')):
        blocks = str(mib * MiB // (512 if fmt == '0' else 4096))
        nsid = _nvme(nvme.sim, 'create-ns', ctrl.char_path, '-s', blocks, '-c', blocks,
                     '-f', fmt).split(':')[-1].strip()
        _nvme(nvme.sim, 'attach-ns', ctrl.char_path, '-n', nsid, '-c', '0')
        _spray(ctrl, int(nsid))
    _nvme(nvme.sim, 'detach-ns', ctrl.char_path, '-n', '1', '-c', '0')
    _nvme(nvme.sim, 'detach-ns', ctrl.char_path, '-n', '3', '-c', '0')
    ctrl.write_free(0, TENANT)                  # and 16 MiB never put in a namespace
    ctrl.write_free(16 * MiB - 4096, TENANT)
    rec = _released_clean(st, ctrl, dev, inst)
    before = rec['details']['layout_before']
    assert [(n['nsid'], n['attached']) for n in before['namespaces']] == \
        [(1, False), (2, True), (3, False)]
    assert before['namespaces'][1]['lba_size'] == 4096
    # The canonical format is the one the device had at discovery, not the tenant's.
    assert rec['details']['layout_after']['namespaces'][0]['lba_size'] == 512


@pytest.mark.parametrize('action', ['sanitize_block', 'write_zeroes'])
def test_tenant_sanitize_still_running(nvme, action):
    st, ctrl, dev, inst = _start(nvme, action, sanitize_seconds=1.0,
                                 spec=ZERO_POLICY if action == 'write_zeroes' else None)
    _spray(ctrl)
    ctrl.update(lie_sanitize=True)              # the tenant's sanitize erases nothing
    _nvme(nvme.sim, 'sanitize', ctrl.char_path, '-a', '2')
    assert ctrl.sanitize_state()['in_progress']
    ctrl.update(lie_sanitize=False)
    rec = _released_clean(st, ctrl, dev, inst)
    assert rec['details']['sanitize_before'].startswith('sanitize still in progress')


@pytest.mark.parametrize('action', ['sanitize_crypto', 'write_zeroes'])
@pytest.mark.parametrize('ause', [False, True])
def test_controller_left_in_sanitize_failure_mode(nvme, action, ause):
    st, ctrl, dev, inst = _start(nvme, action,
                                 spec=ZERO_POLICY if action == 'write_zeroes' else None)
    _spray(ctrl)
    ctrl.inject_sanitize_failure()
    _nvme(nvme.sim, 'sanitize', ctrl.char_path, '-a', '2', *(['--ause'] if ause else []))
    ctrl.wait_sanitize()
    state = ctrl.sanitize_state()
    assert state['status'] == 'failed'
    assert state['failure_mode'] == ('unrestricted' if ause else 'restricted')
    rec = _released_clean(st, ctrl, dev, inst)
    assert rec['details']['failure_mode'].startswith(
        'unrestricted' if ause else 'restricted')


def test_tenant_sanitize_that_erased_nothing(nvme):
    st, ctrl, dev, inst = _start(nvme, 'write_zeroes', spec=ZERO_POLICY)
    _spray(ctrl)
    ctrl.inject_sanitize_lie()
    _nvme(nvme.sim, 'sanitize', ctrl.char_path, '-a', '2')
    ctrl.wait_sanitize()
    assert ctrl.sanitize_state()['status'] == 'success'
    _released_clean(st, ctrl, dev, inst)


# --- hardware that lies --------------------------------------------------------------
@pytest.mark.parametrize('action', ['sanitize_crypto', 'sanitize_block'])
def test_drive_whose_sanitize_reports_success_and_erases_nothing(nvme, action):
    st, ctrl, dev, inst = _start(nvme, action)
    _spray(ctrl)
    ctrl.update(lie_sanitize=True)
    rec = _released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')
    assert 'watermark survived' in rec['error_message']
    assert rec['sstat'] == 1                    # the drive said it succeeded


def test_drive_whose_write_zeroes_report_success_and_write_nothing(nvme):
    st, ctrl, dev, inst = _start(nvme, 'write_zeroes')
    _spray(ctrl)
    ctrl.update(lie_write_zeroes=True)
    rec = _released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')
    assert 'watermark survived' in rec['error_message']
    # The operator replaces the drive's firmware; a re-clean then succeeds.
    ctrl.update(lie_write_zeroes=False)
    assert st.clean(dev['uuid']).status_code == 202
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert ctrl.find_on_media(NEEDLE) == []


def test_media_that_cannot_be_addressed_is_never_reported_clean(nvme):
    """No namespace management and no namespace the host can open: nothing can be
    laid out or read back, so nothing can be verified. Error, not an unverified
    success."""
    ctrl = nvme.sim.add_controller(namespaces=[], capacity=CAPACITY, ns_mgmt=False,
                                   **CAPS['shred'])
    st = nvme.start()
    dev = st.device()
    inst, _, alloc, bind = st.bind(dev)
    assert bind.status_code == 202, bind.text
    rec = _released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.namespace_failed')
    assert 'neither addressed nor laid out' in rec['error_message']


# --- the host: devices that vanish, agents that are down -------------------------------
V26 = {'OpenStack-API-Version': 'accelerator 2.6'}


def _offered(st):
    """This host's providers Placement would give Nova for one NVMe device now (the
    Placement server is shared with other tests' hosts)."""
    from tests.fixtures import placement_fixture
    with placement_fixture.admin_session(st.placement_url) as s:
        ours = {rp['uuid'] for rp in s.get('/resource_providers').json()[
            'resource_providers'] if rp['name'].startswith(f'{st.host}_')}
        r = s.get(f'/allocation_candidates?resources={nvme_stack.RC}:1',
                  headers={'OpenStack-API-Version': 'placement 1.39'})
    assert r.status_code == 200, r.text
    return sorted(rp for req in r.json()['allocation_requests']
                  for rp in req['allocations'] if rp in ours)


def _show(st, dev_uuid):
    r = st.api.get(f'/v2/devices/{dev_uuid}', headers=V26)
    assert r.status_code == 200, r.text
    return r.json()


def _quarantined_by_a_lying_drive(nvme):
    st, ctrl, dev, inst = _start(nvme, 'write_zeroes')
    _spray(ctrl)
    ctrl.update(lie_write_zeroes=True)
    _released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')
    ctrl.update(lie_write_zeroes=False)
    assert _offered(st) == []
    return st, ctrl, dev


@pytest.mark.parametrize('how', ['unplug', 'device_spec'])
def test_error_device_that_vanishes_and_returns_is_still_error(nvme, how):
    st, ctrl, dev, = _quarantined_by_a_lying_drive(nvme)
    history = st.records(dev['uuid'])
    if how == 'unplug':
        ctrl.unplug()
    else:
        nvme.conf.set_override('device_spec', ['{"vendor_id": "1234"}'], group='nvme')
        st.kill_agent()
        st.start_agent(discover=False)      # a device_spec edit takes a restart
    st.discover()
    gone = _show(st, dev['uuid'])
    assert (gone['device_state'], gone['missing']) == ('error', True)
    assert gone['missing_since'] and gone['last_error']
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 1
    assert _offered(st) == []
    if how == 'unplug':
        ctrl.replug()
    else:
        nvme.conf.set_override('device_spec', ['{"vendor_id": "8086"}'], group='nvme')
        st.kill_agent()
        st.start_agent(discover=False)
    st.discover()
    back = _show(st, dev['uuid'])
    assert (back['device_state'], back['missing'], back['uuid']) == \
        ('error', False, dev['uuid'])
    assert st.records(dev['uuid']) == history
    assert [d['uuid'] for d in st.devices()] == [dev['uuid']]
    assert _offered(st) == []


def test_device_back_at_another_pci_address_keeps_its_identity(nvme):
    st, ctrl, dev = _quarantined_by_a_lying_drive(nvme)
    history = st.records(dev['uuid'])
    ctrl.unplug()
    st.discover()
    assert _show(st, dev['uuid'])['missing'] is True
    ctrl.replug(address='0000:0b:00.0')
    st.discover()
    [back] = st.devices()
    assert back['uuid'] == dev['uuid'] and back['device_state'] == 'error'
    assert json.loads(back['std_board_info'])['pci_address'] == '0000:0b:00.0'
    assert st.records(dev['uuid']) == history
    dep = st.deployable(back)
    assert dep['name'].endswith('_0000:0b:00.0')
    inv = st.inventory(dep['rp_uuid'])
    assert inv['reserved'] == inv['total'] == 1
    assert _offered(st) == []
    # The operator re-cleans it where it is now; then, and only then, it is offered.
    assert st.clean(dev['uuid']).status_code == 202
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert ctrl.find_on_media(NEEDLE) == []
    assert len(_offered(st)) == 1


def test_agent_down_when_the_instance_is_deleted(nvme):
    """The spec's missed-cleanup path: the unbind finds no agent, the device stays
    allocated (reserved); the agent's start cleans it without an operator."""
    st, ctrl, dev, inst = _start(nvme, 'sanitize_crypto')
    _spray(ctrl)
    st.kill_agent()
    st.release(inst)
    held = _show(st, dev['uuid'])
    assert held['device_state'] == 'allocated'
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 1
    assert ctrl.find_on_media(NEEDLE)
    st.start_agent()
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available', \
        st.records(dev['uuid'])
    assert ctrl.find_on_media(NEEDLE) == []
    rec = st.records(dev['uuid'])[0]
    assert (rec['trigger'], rec['status']) == ('recovery', 'succeeded')
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0

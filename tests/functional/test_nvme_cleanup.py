"""Secure cleanup end to end: simulated controllers under the real nvme-cli, the real
conductor and agent over real RPC, the real Placement, the API.

The promise under test: a device never reaches the next tenant with the previous
tenant's data on it. Each fault leaves the device in error, reserved in Placement and
refused to binds; POST /clean after the fault is fixed makes it available again.
"""
import json
import time

import pytest

from steward.common import exception
from steward.common import states
from steward import privsep
from steward.privsep import blockdev
from tests.functional import nvme_stack
from tests.functional.nvme_stack import LATEST, TENANT, nvme  # noqa: F401 (fixture)

MiB = 2 ** 20


def _write_tenant_data(ctrl):
    for ns in ctrl.namespaces():
        for off in (0, 5 * MiB, ns['size'] - 8192):
            ctrl.write(off, TENANT, nsid=ns['nsid'])
    assert nvme_stack.tenant_bytes_anywhere(ctrl)


@pytest.fixture
def marks_spy(nvme, monkeypatch):
    """The digest of every watermark the cleanup writes, as the privsep daemon
    answers them (the daemon writes the marks; its call is observed on the agent's
    side, after the daemon started, so the daemon keeps the real entrypoint)."""
    written = []
    privsep.block_io.start()
    real = blockdev.write_marks

    def spy(path):
        marks = real(path)
        written.extend(digest for _, digest in marks)
        return marks
    monkeypatch.setattr(blockdev, 'write_marks', spy)
    return written


HISTORY = {'OpenStack-API-Version': 'accelerator 2.6'}


def _transitions(st, dev_uuid):
    """(from, event, to, actor kind) of every device_state change of the device,
    oldest first, from its history (GET /v2/devices/{uuid}/history, 2.6)."""
    r = st.api.get(f'/v2/devices/{dev_uuid}/history', headers=HISTORY)
    assert r.status_code == 200, r.text
    return [(h['source_state'], h['event'], h['target_state'], h['actor'].split()[0])
            for h in r.json()['history']]


def _assert_quarantined(st, dev, code=None):
    """error, reserved whole in Placement, refused to binds (Placement and Cyborg)."""
    dev_now = st.api.get(f'/v2/devices/{dev["uuid"]}', headers=LATEST).json()
    assert dev_now['device_state'] == states.DEV_ERROR
    rp = st.deployable(dev)['rp_uuid']
    inv = st.inventory(rp)
    assert inv['reserved'] == inv['total'] == 1
    inst, arq, alloc, bind = st.bind(dev, profile='again')
    assert alloc.status_code == 409, alloc.text          # Placement: no capacity left
    assert bind.status_code == 409, bind.text            # Cyborg's bind guard
    assert bind.json()['error_code'] == 'cyb.bind.device_not_available'
    st.api.delete(f'/v2/accelerator_requests/{arq}')
    if code is not None:
        rec = st.records(dev['uuid'])[0]
        assert rec['error_code'] == code, rec
        assert rec['status'] in ('failed', 'interrupted')
        assert rec['assurance_level'] == 'none'
    return dev_now


def _reclean(st, dev, ctrl):
    r = st.clean(dev['uuid'])
    assert r.status_code == 202, r.text
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available', \
        st.records(dev['uuid'])[0]
    assert st.inventory(st.deployable(dev)['rp_uuid'])['reserved'] == 0
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)
    rec = st.records(dev['uuid'])[0]
    assert (rec['status'], rec['trigger'], rec['verification']) == \
        ('succeeded', 'operator', 'passed')


def _allocated(st, dev, ctrl):
    inst, _, alloc, bind = st.bind(dev)
    assert alloc.status_code == 204, alloc.text
    assert bind.status_code == 202, bind.text
    assert st.device()['device_state'] == states.DEV_ALLOCATED
    _write_tenant_data(ctrl)
    return inst


# --- the happy paths ---------------------------------------------------------------
@pytest.mark.parametrize('caps,action,assurance', [
    (dict(ces=True, bes=True, wzs=True), 'sanitize_crypto', 'purge-crypto'),
    (dict(ces=False, bes=True, wzs=True), 'sanitize_block', 'purge-block'),
    (dict(ces=False, bes=False, wzs=True, fna=0x4), 'format_crypto', 'secure-erase-crypto'),
    (dict(ces=False, bes=False, wzs=True), 'format_user_data', 'secure-erase-user-data'),
    (dict(ces=False, bes=False, wzs=True, format_nvm=False), 'write_zeroes',
     'clear-write-zeroes'),
    (dict(ces=False, bes=False, wzs=False, format_nvm=False), 'shred', 'clear-overwrite'),
])
def test_released_device_is_cleaned_before_it_is_available_again(
        nvme, marks_spy, caps, action, assurance):
    ctrl = nvme.sim.add_controller(namespaces=[32 * MiB, 16 * MiB], serial='SN-E2E',
                                   firmware='FW42', sanitize_seconds=0.3, **caps)
    st = nvme.start()
    dev = st.device()
    board = json.loads(dev['std_board_info'])
    assert (dev['type'], dev['vendor'], dev['model']) == ('NVME', '8086', '0a54')
    assert board['cleanup_action'] == action and board['pci_address'] == '0000:0a:00.0'
    assert dev['device_state'] == states.DEV_AVAILABLE
    dep = st.deployable(dev)
    assert dep['name'] == f'{nvme.host}_0000:0a:00.0'
    assert st.inventory(dep['rp_uuid'])['reserved'] == 0
    want = {'OWNER_CYBORG'} | {f'HW_NVME_{c.upper()}' for c in ('ces', 'bes', 'wzs')
                               if caps[c]}
    assert st.traits(dep['rp_uuid']) == want

    inst = _allocated(st, dev, ctrl)
    assert st.inventory(dep['rp_uuid'])['reserved'] == 1
    st.release(inst)
    seen = st.wait_state(dev['uuid'], ('available', 'error'))
    assert seen[-1] == 'available', st.records(dev['uuid'])
    assert _transitions(st, dev['uuid']) == [
        ('available', 'bind', 'allocated', 'conductor'),
        ('allocated', 'release_for_cleaning', 'pending_cleaning', 'conductor'),
        ('pending_cleaning', 'start_cleaning', 'cleaning', 'agent'),
        ('cleaning', 'cleaned', 'available', 'agent')]
    assert st.inventory(dep['rp_uuid'])['reserved'] == 0

    # Nothing of the tenant, nothing of the watermarks: read independently of Steward.
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)
    assert marks_spy and not nvme_stack.blocks_anywhere(ctrl, marks_spy)
    rec = st.records(dev['uuid'])[0]
    assert rec['status'] == 'succeeded' and rec['trigger'] == 'unbind'
    assert (rec['action'], rec['assurance_level'], rec['verification']) == \
        (action, assurance, 'passed')
    assert (rec['serial'], rec['firmware'], rec['model']) == ('SN-E2E', 'FW42', 'Sim NVMe')
    fmt = caps.get('format_nvm', True)          # the simulator's defaults: OACS bit 1,
    fna = caps.get('fna', 0x4 if caps['ces'] else 0)        # FNA bit 2 with CES
    assert rec['capabilities'] == {'ces': caps['ces'], 'bes': caps['bes'],
                                   'wzs': caps['wzs'], 'ns_mgmt': True,
                                   'format_erase': fmt,
                                   'format_crypto': fmt and bool(fna & 0x4)}
    assert rec['started_at'] and rec['finished_at']
    if action.startswith('sanitize'):
        assert rec['sstat'] == 1 and 'succeeded' in rec['sstat_text']
        sanitizes = [c for c in ctrl.commands() if c.get('opcode') == 0x84]
        assert len(sanitizes) == 1
        assert sanitizes[0]['cdw10'] & 7 == (4 if action == 'sanitize_crypto' else 2)
    elif action.startswith('format'):
        # One Format NVM, to the one canonical namespace (the simulator's FNA has no
        # bit 0), with SES 2 or 1 in cdw10 bits 11:9 and the LBA format kept.
        formats = [c for c in ctrl.commands() if c.get('queue') == 'admin'
                   and c['opcode'] == 0x80]
        ses = 2 if action == 'format_crypto' else 1
        assert [(c['nsid'], c['cdw10'], c['status']) for c in formats] == \
            [(1, ses << 9, 0)]
        assert rec['details']['format'] == {'ses': ses, 'nsids': [1], 'scope': (
            'each namespace (1): FNA 0x4 formats only the namespace named' if ses == 2 else
            'each namespace (1): FNA 0x0 formats only the namespace named')}
    else:
        assert ctrl.read(0, MiB) == bytes(MiB)
    # Every path: the two namespaces became the canonical one covering the capacity,
    # and the erase record says so.
    assert [(ns['size'], ns['attached']) for ns in ctrl.namespaces()] == [(48 * MiB, True)]
    before, after = rec['details']['layout_before'], rec['details']['layout_after']
    assert [ns['nsid'] for ns in before['namespaces']] == [1, 2]
    assert after == {'capacity': 48 * MiB, 'unallocated': 0, 'namespaces': [
        {'nsid': 1, 'attached': True, 'blocks': 48 * MiB // 512, 'lba_size': 512,
         'bytes': 48 * MiB}]}
    assert rec['details']['layout_changes'][0]['deleted'] == [1, 2]

    # And the device is handed out again.
    inst2, _, alloc, bind = st.bind(st.device(), profile='next-tenant')
    assert alloc.status_code == 204 and bind.status_code == 202, bind.text


@pytest.mark.parametrize('api_runs_arqs', [False, True],
                         ids=['conductor-binds', 'api-binds'])
def test_unbind_by_patch_cleans_too(nvme, api_runs_arqs):
    """Also with the API running the ARQ operations itself: it hands the released
    device to the conductor (device_release_for_cleaning over the broker), which
    asks the agent."""
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.1)
    st = nvme.start(api_runs_arqs=api_runs_arqs)
    dev = st.device()
    _, arq, _, bind = st.bind(dev)
    assert bind.status_code == 202
    ctrl.write(0, TENANT)
    r = st.api.patch('/v2/accelerator_requests', json={arq: [
        {'op': 'remove', 'path': '/hostname'}, {'op': 'remove', 'path': '/device_rp_uuid'},
        {'op': 'remove', 'path': '/instance_uuid'}]})
    assert r.status_code == 202, r.text
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)
    # Who did what: the bind's device transition is the API's when it binds.
    assert _transitions(st, dev['uuid'])[0] == (
        'available', 'bind', 'allocated', 'api' if api_runs_arqs else 'conductor')
    assert _transitions(st, dev['uuid'])[1] == (
        'allocated', 'release_for_cleaning', 'pending_cleaning', 'conductor')


def test_write_zeroes_is_the_kernels_zeroout_over_the_whole_namespace(nvme):
    """write_zeroes asks the kernel (BLKZEROOUT, which issues the controller's Write
    Zeroes at their largest size), not one nvme-cli process per 65536 blocks."""
    ctrl = nvme.sim.add_controller(namespaces=[80 * MiB], ces=False, bes=False, wzs=True,
                                   ns_mgmt=False, format_nvm=False)
    st = nvme.start()
    dev = st.device()
    st.release(_allocated(st, dev, ctrl))
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'available'
    zeroouts = [c for c in ctrl.commands() if c.get('name') == 'blkzeroout']
    assert len(zeroouts) == 1 and zeroouts[0]['status'] == 0
    assert not [c for c in ctrl.commands()
                if c.get('queue') == 'io' and c.get('opcode') == 0x08]
    assert st.records(dev['uuid'])[0]['details']['bytes_zeroed'] == 80 * MiB
    assert not nvme_stack.tenant_bytes_anywhere(ctrl)


# --- faults ------------------------------------------------------------------------
def test_sanitize_command_failure(nvme):
    ctrl = nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    inst = _allocated(st, dev, ctrl)
    ctrl.inject(opcode=0x84, status=0x4286, times=1)        # Access Denied (SED-locked)
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    _assert_quarantined(st, dev, 'cyb.cleanup.sanitize_failed')
    # its number: 2.x names it Access Denied, 1.x ACCESS_DENIED
    assert '0x4286' in st.records(dev['uuid'])[0]['error_message']
    assert nvme_stack.tenant_bytes_anywhere(ctrl)       # nothing was erased: and it shows
    _reclean(st, dev, ctrl)


def test_sanitize_ending_in_sstat_failed(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.2)
    st = nvme.start()
    dev = st.device()
    inst = _allocated(st, dev, ctrl)
    ctrl.inject_sanitize_failure()
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    rec = st.records(dev['uuid'])[0]
    assert rec['sstat'] == 3 and 'failed' in rec['sstat_text']
    _assert_quarantined(st, dev, 'cyb.cleanup.sanitize_failed')
    assert ctrl.sanitize_state()['status'] == 'failed'
    _reclean(st, dev, ctrl)


def test_cleanup_timeout_with_a_hung_sanitize(nvme):
    """The controller's sanitize hangs at 43 %; the operator lowers [nvme]
    cleanup_timeout (a reload applies it to the cleanups running): the cleanup
    ends in error with the step it was stuck in, and a re-clean waits for the
    stuck sanitize rather than starting a second one. The timeout is lowered once
    the agent has reported polling the hung sanitize, so however slow the steps
    before it, it strikes there."""
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.3)
    st = nvme.start()
    dev = st.device()
    inst = _allocated(st, dev, ctrl)
    ctrl.inject_sanitize_hang(progress=0.43)
    st.release(inst)
    deadline = time.monotonic() + 120
    while not any(r['status'] == 'running' and r['progress'] == 43
                  for r in st.records(dev['uuid'])):
        assert time.monotonic() < deadline, st.records(dev['uuid'])
        time.sleep(0.05)
    nvme.conf.set_override('cleanup_timeout', 1, group='nvme')
    assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
    _assert_quarantined(st, dev, 'cyb.cleanup.deadline_exceeded')
    rec = st.records(dev['uuid'])[0]
    assert '43 %' in rec['error_message']
    # Re-cleaning while the controller is still stuck: it waits, and times out again.
    ctrl.release_sanitize_hang()
    nvme.conf.set_override('cleanup_timeout', 30, group='nvme')
    _reclean(st, dev, ctrl)
    # The stuck one and ours: never a second one while the first still ran (the
    # controller would have refused it and the re-clean would have failed).
    assert [c['cdw10'] & 7 for c in ctrl.commands() if c.get('opcode') == 0x84] == [4, 4]


@pytest.mark.slow
def test_agent_killed_mid_clean_then_restarted(nvme):
    ctrl = nvme.sim.add_controller(sanitize_seconds=0.3)
    st = nvme.start()
    dev = st.device()
    inst = _allocated(st, dev, ctrl)
    ctrl.inject_sanitize_hang(progress=0.43)
    st.release(inst)
    assert st.wait_state(dev['uuid'], ('cleaning',))[-1] == 'cleaning'
    deadline = time.monotonic() + 20
    while not ctrl.sanitize_state()['in_progress']:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    st.kill_agent()
    assert st.device()['device_state'] == 'cleaning'     # nobody reported anything
    st.start_agent()                                    # the restart: init_host recovers
    _assert_quarantined(st, dev, 'cyb.cleanup.interrupted')
    rec = st.records(dev['uuid'])[0]
    assert rec['status'] == 'interrupted'
    assert 'sanitize still in progress 43 %' in rec['error_message']
    ctrl.release_sanitize_hang()
    _reclean(st, dev, ctrl)


def test_nvme_cli_missing_at_cleanup_time(nvme):
    ctrl = nvme.sim.add_controller()
    st = nvme.start()
    dev = st.device()
    inst = _allocated(st, dev, ctrl)
    with nvme.sim.remove_nvme_cli():
        st.release(inst)
        assert st.wait_state(dev['uuid'], ('available', 'error'))[-1] == 'error'
        _assert_quarantined(st, dev, 'cyb.nvme.cli_missing')
        # Discovery goes on without it: the device stays reported and in error.
        st.discover()
        assert st.device()['device_state'] == 'error'
    _reclean(st, dev, ctrl)


def test_agent_does_not_start_without_nvme_cli(nvme):
    nvme.sim.add_controller()
    nvme.sim.remove_nvme_cli()
    st = nvme.start(agent=False)
    with pytest.raises(exception.NvmeCliMissing) as err:
        st.start_agent()
    assert err.value.code == 'cyb.nvme.cli_missing'
    assert 'install the nvme-cli package' in str(err.value)
    st.kill_agent()

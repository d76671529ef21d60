"""The capability matrix, end to end (issue 21): one simulated controller per family
operators buy (tests/nvme_sim/presets.py, from real models' Identify data), driven
through the public API as in test_nvme_tenant_proof.py.

For every preset: bind, the tenant fills every namespace, delete; the device ends
``available`` with no tenant byte anywhere on its media and an erase record naming
the path taken and what Identify advertised. The simulator refuses what the
controller does not advertise with the specification's status, so a cleanup that
asks for anything the controller never claimed fails loudly: every command the
cleanup sent must have completed successfully. Where the operator's policy cannot be
met, the device is refused at discovery, with one WARNING and its reason.
"""
import json
import logging

import pytest

from steward.common import states
from tests.functional import test_nvme_tenant_proof as proof
from tests.functional.nvme_stack import TENANT, nvme  # noqa: F401 (fixture)
from tests.nvme_sim import presets

MiB = 2 ** 20
CAPACITY = proof.CAPACITY
NEEDLE = proof.NEEDLE

# preset -> (action auto/auto locks in, assurance level). Both client families have
# Format NVM (OACS bit 1) and no sanitize: Format's secure erase ranks above Write
# Zeroes (it reaches the namespace's user data wherever the drive keeps it).
PATHS = {
    'enterprise_crypto_block': ('sanitize_crypto', 'purge-crypto'),
    'block_erase': ('sanitize_block', 'purge-block'),
    'client_format': ('format_crypto', 'secure-erase-crypto'),
    'write_zeroes_dealloc': ('format_user_data', 'secure-erase-user-data'),
    'minimal': ('shred', 'clear-overwrite'),
}
assert set(PATHS) == set(presets.NAMES)
ZERO = ['{"vendor_id": "8086", "clear_action": "zero"}']
# (preset, device_spec) -> (action, assurance): auto/auto on every family, and the
# write zeroes path where an operator forbids Format (clear_action=zero).
MATRIX = {**{(name, None): path for name, path in PATHS.items()},
          ('write_zeroes_dealloc', 'zero'): ('write_zeroes', 'clear-write-zeroes')}


def _start(nvme, preset, spec=None, **extra):
    if spec is not None:
        nvme.conf.set_override('device_spec', spec, group='nvme')
    fields = presets.get(preset)
    # A controller with namespace management and room for two starts split in two
    # (the tenant fills both); others have the one namespace they were shipped with.
    namespaces = [CAPACITY // 2] * 2 if fields['ns_mgmt'] and \
        fields['max_namespaces'] > 1 else [CAPACITY]
    ctrl = nvme.sim.add_controller(preset=preset, namespaces=namespaces,
                                   sanitize_seconds=extra.pop('sanitize_seconds', 0.3),
                                   **extra)
    st = nvme.start()
    dev = st.device()
    inst, _, alloc, bind = st.bind(dev)
    assert (alloc.status_code, bind.status_code) == (204, 202), bind.text
    return st, ctrl, dev, inst


def _fill_every_namespace(ctrl):
    for ns in ctrl.namespaces():
        proof._spray(ctrl, nsid=ns['nsid'])


def _refused(ctrl, since=0):
    """Commands (not ioctls) the controller refused, after the first ``since``."""
    return [c for c in ctrl.commands()[since:]
            if c['queue'] in ('admin', 'io') and c['status']]


def _sanitize_log_reads(ctrl):
    return [c for c in ctrl.commands() if c['queue'] == 'admin' and c['opcode'] == 0x02
            and c['cdw10'] & 0xff == 0x81]


@pytest.mark.parametrize('preset,policy', sorted(MATRIX, key=str),
                         ids=lambda v: str(v or 'auto'))
def test_every_family_comes_back_clean_on_the_path_its_identify_data_allows(
        nvme, preset, policy):
    action, assurance = MATRIX[preset, policy]
    st, ctrl, dev, inst = _start(nvme, preset, spec=ZERO if policy == 'zero' else None)
    board = json.loads(dev['std_board_info'])
    assert board['cleanup_action'] == action
    fields = presets.get(preset)
    sanicap = fields['sanicap_extra'] | fields['ces'] | fields['bes'] << 1
    assert board['cleanup']['identify']['fields']['sanicap'] == f'{sanicap:#x}'
    _fill_every_namespace(ctrl)
    before = len(ctrl.commands())
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert (rec['action'], rec['assurance_level']) == (action, assurance)
    # Nothing the controller does not advertise was asked for.
    assert _refused(ctrl, before) == []
    decision = rec['capability_decision']
    assert decision['chosen'] == action and decision['assurance_level'] == assurance
    assert decision['why'] == board['cleanup']['reason']
    available = decision['available']
    assert available == {**board['cleanup']['identify'], 'dlfeat': available['dlfeat']}
    sanitizes = bool(fields['ces'] or fields['bes'])
    assert available['sanitize']['status_log_0x81'] is sanitizes
    if sanitizes:
        assert _sanitize_log_reads(ctrl)
        assert decision['uses']['sanitize_log'].startswith('Get Log Page 0x81')
    else:
        # The bug of issue 21: the log page 0x81 of a SANICAP=0 controller was read
        # unconditionally, answered Invalid Log Page, and the device went to error.
        assert _sanitize_log_reads(ctrl) == []
        assert decision['uses']['sanitize_log'].startswith('not read')
        assert rec['details']['sanitize_before'].startswith('no sanitize')
    if fields['version'] < 0x10100:
        assert 'CNS 00h for nsid 1..1' in decision['uses']['namespace_list']
        assert not [c for c in ctrl.commands() if c['queue'] == 'admin' and
                    c['opcode'] == 0x06 and c['cdw10'] & 0xff == 0x02]
    else:
        assert decision['uses']['namespace_list'].startswith('Identify CNS 02h')
    formats = [c for c in ctrl.commands()[before:] if c['queue'] == 'admin'
               and c['opcode'] == 0x80]
    if action.startswith('format_'):
        # One Format NVM with the Secure Erase Settings of the path (cdw10 bits
        # 11:9), to the namespace(s) FNA says it covers.
        ses = 2 if action == 'format_crypto' else 1
        assert [(c['cdw10'] >> 9) & 7 for c in formats] == [ses]
        assert decision['uses']['erase'].startswith(f'Format NVM SES {ses}')
        assert rec['details']['format']['ses'] == ses
    else:
        assert formats == []
    # The API shows it (GET /v2/devices/{uuid}/erase_records).
    assert st.records(dev['uuid'])[0]['capability_decision'] == decision


@pytest.mark.parametrize('preset,policy,missing', [
    ('client_format', {'clear_action': 'sanitize'}, 'CES'),
    ('block_erase', {'clear_strategy': 'crypto'}, 'CES'),
    ('minimal', {'clear_action': 'sanitize'}, 'BES'),
    # clear_action=format requires Format NVM; crypto also FNA bit 2
    ('write_zeroes_dealloc', {'clear_action': 'format', 'clear_strategy': 'crypto'},
     'FNA bit 2'),
    ('minimal', {'clear_action': 'format'}, 'Format NVM (OACS bit 1)'),
], ids=str)
def test_a_policy_the_family_cannot_meet_is_refused_at_discovery(nvme, caplog, preset,
                                                                 policy, missing):
    nvme.conf.set_override('device_spec', [json.dumps({'vendor_id': '8086', **policy})],
                           group='nvme')
    nvme.sim.add_controller(preset=preset, namespaces=[CAPACITY])
    with caplog.at_level(logging.WARNING):
        st = nvme.start()
        st.discover()                       # a second discovery says nothing new
    dev = st.device()
    # ONE line, from any service (agent's driver, conductor) on any logger.
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING
             and ('excluded' in r.getMessage() or 'kept in error' in r.getMessage())]
    assert len(lines) == 1, [(r.name, r.levelname, r.getMessage()) for r in lines]
    warnings = [r for r in lines if r.name == 'steward.drivers.nvme.driver'
                and 'excluded from the pool' in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING, warnings
    assert missing in warnings[0].getMessage()
    assert dev['device_state'] == states.DEV_ERROR
    shown = st.api.get(f'/v2/devices/{dev["uuid"]}', headers=proof.V26).json()
    assert shown['last_error'].startswith('excluded: ') and missing in shown['last_error']
    inv = st.inventory(st.deployable(dev)['rp_uuid'])
    assert inv['reserved'] == inv['total'] == 1
    _, _, alloc, bind = st.bind(dev)
    assert alloc.status_code == 409 and bind.status_code == 409


# --- the tenant-proof and lying-drive scenarios, on the presets they apply to --------
@pytest.mark.parametrize('preset', ['enterprise_crypto_block', 'block_erase'])
def test_lying_sanitize_is_caught_on_sanitize_families(nvme, preset):
    st, ctrl, dev, inst = _start(nvme, preset)
    _fill_every_namespace(ctrl)
    ctrl.update(lie_sanitize=True)
    rec = proof._released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')
    assert rec['sstat'] == 1 and rec['capability_decision']['chosen'] == PATHS[preset][0]


@pytest.mark.parametrize('preset', ['client_format', 'write_zeroes_dealloc'])
def test_lying_write_zeroes_is_caught_on_zeroing_families(nvme, preset):
    st, ctrl, dev, inst = _start(nvme, preset, spec=ZERO)
    assert json.loads(dev['std_board_info'])['cleanup_action'] == 'write_zeroes'
    _fill_every_namespace(ctrl)
    ctrl.update(lie_write_zeroes=True)
    proof._released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')


@pytest.mark.parametrize('preset', ['client_format', 'write_zeroes_dealloc'])
def test_lying_format_is_caught_on_format_families(nvme, preset):
    """Format NVM completes with success and erases nothing: the watermarks survive,
    the device goes to error (reserved, binds refused), never available."""
    st, ctrl, dev, inst = _start(nvme, preset)
    _fill_every_namespace(ctrl)
    ctrl.update(lie_format=True)
    rec = proof._released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.verify_failed')
    assert rec['capability_decision']['chosen'] == PATHS[preset][0]
    assert [c for c in ctrl.commands() if c['queue'] == 'admin' and c['opcode'] == 0x80
            and c['status'] == 0], 'the lie: Format NVM reported success'


def test_tenant_format_still_running_on_the_client_family(nvme):
    """The tenant started a Format NVM that takes long (its nvme-cli outlives the
    release here; on a real drive the controller goes on without it): the cleanup's
    own Format NVM meets Format In Progress (0x84) and the device goes to error with
    the reason, never available unverified."""
    import subprocess
    st, ctrl, dev, inst = _start(nvme, 'client_format')
    _fill_every_namespace(ctrl)
    ctrl.update(format_seconds=6.0)
    tenant = subprocess.Popen([nvme.sim.nvme_cli, 'format', ctrl.char_path, '-n', '1',
                               '--ses=1', '--force'], env=nvme.sim.environ(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time
        deadline = time.monotonic() + 10
        while not int(ctrl._state().get('fmt_until', 0) or 0):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        rec = proof._released_quarantined(st, ctrl, dev, inst, 'cyb.cleanup.format_failed')
    finally:
        tenant.wait(timeout=30)
    assert '0x84' in rec['error_message'], rec['error_message']


def test_tenant_sanitize_still_running_on_the_block_erase_family(nvme):
    st, ctrl, dev, inst = _start(nvme, 'block_erase', sanitize_seconds=1.0)
    _fill_every_namespace(ctrl)
    ctrl.update(lie_sanitize=True)              # the tenant's sanitize erases nothing
    proof._nvme(nvme.sim, 'sanitize', ctrl.char_path, '-a', '2')
    ctrl.update(lie_sanitize=False)
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['details']['sanitize_before'].startswith('sanitize still in progress')


def test_restricted_failure_mode_on_the_enterprise_family(nvme):
    st, ctrl, dev, inst = _start(nvme, 'enterprise_crypto_block')
    _fill_every_namespace(ctrl)
    ctrl.inject_sanitize_failure()
    proof._nvme(nvme.sim, 'sanitize', ctrl.char_path, '-a', '2')
    ctrl.wait_sanitize()
    assert ctrl.sanitize_state()['failure_mode'] == 'restricted'
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['details']['failure_mode'].startswith('restricted')


def test_tenant_namespace_games_on_the_enterprise_family(nvme):
    st, ctrl, dev, inst = _start(nvme, 'enterprise_crypto_block')
    _fill_every_namespace(ctrl)
    proof._nvme(nvme.sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    proof._nvme(nvme.sim, 'delete-ns', ctrl.char_path, '-n', '1')
    assert ctrl.free_media_path() in {p for p, _ in ctrl.find_on_media(NEEDLE)}
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['details']['layout_before']['namespaces'] == [{'nsid': 2, 'attached': False}]


@pytest.mark.parametrize('preset', ['client_format', 'write_zeroes_dealloc', 'minimal'])
def test_what_the_tenant_cannot_do_on_families_without_sanitize(nvme, preset):
    """A tenant on a controller without sanitize or namespace management cannot start
    a sanitize or hide data in another namespace: the controller refuses it with the
    specification's status, and the cleanup has nothing to settle."""
    st, ctrl, dev, inst = _start(nvme, preset)
    _fill_every_namespace(ctrl)
    for args, status in ((('sanitize', ctrl.char_path, '-a', '2'), '0x4001'),
                         (('sanitize-log', ctrl.char_path), '0x4109'),
                         (('detach-ns', ctrl.char_path, '-n', '1', '-c', '0'), '0x4001')):
        r = nvme.sim.nvme(*args)
        # 2.x exits 1, 1.x with the status's errno (22 for these)
        assert r.returncode != 0 and f'({status})' in r.stderr, (args, r.stderr)
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['details']['sanitize_before'].startswith('no sanitize')


def test_the_plan_says_what_the_family_will_be_sent(nvme):
    """GET .../clean_plan on a SANICAP=0 controller without namespace management:
    neither the sanitize log nor a layout change is promised."""
    nvme.sim.add_controller(preset='write_zeroes_dealloc', namespaces=[CAPACITY])
    st = nvme.start()
    dev = st.device()
    plan = st.api.get(f'/v2/devices/{dev["uuid"]}/clean_plan', headers=proof.V26).json()
    assert plan['cleanup_action'] == 'format_user_data'
    assert plan['assurance_level'] == 'secure-erase-user-data'
    assert any(step.startswith('nvme format --ses=1') for step in plan['steps'])
    assert plan['identify']['sanitize']['status_log_0x81'] is False
    assert plan['steps'][0].startswith('nothing to settle')
    assert plan['steps'][1].startswith('no namespace management')
    assert not any('sanitize log' in step for step in plan['steps'])


def test_tenant_shrinks_the_only_namespace_on_the_block_erase_family(nvme):
    """NN 1 with namespace management: the tenant deletes its namespace and makes a
    smaller one; the rest of its bytes sit in unallocated capacity."""
    st, ctrl, dev, inst = _start(nvme, 'block_erase')
    _fill_every_namespace(ctrl)
    proof._nvme(nvme.sim, 'delete-ns', ctrl.char_path, '-n', '1')
    out = proof._nvme(nvme.sim, 'create-ns', ctrl.char_path, '-s', str(8 * MiB // 512),
                      '-c', str(8 * MiB // 512), '-f', '0')
    proof._nvme(nvme.sim, 'attach-ns', ctrl.char_path, '-n', out.split(':')[-1].strip(),
                '-c', '0')
    assert ctrl.free_media_path() in {p for p, _ in ctrl.find_on_media(NEEDLE)}
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['details']['layout_before']['unallocated'] == CAPACITY - 8 * MiB


def test_a_zero_policy_on_a_drive_without_write_zeroes_overwrites_from_the_host(nvme):
    st, ctrl, dev, inst = _start(nvme, 'block_erase',
                                 spec=['{"vendor_id": "8086", "clear_action": "zero"}'])
    assert json.loads(dev['std_board_info'])['cleanup_action'] == 'shred'
    _fill_every_namespace(ctrl)
    before = len(ctrl.commands())
    rec = proof._released_clean(st, ctrl, dev, inst)
    assert rec['action'] == 'shred' and _refused(ctrl, before) == []
    # it still has a sanitize the tenant could have used: the log is read to settle
    assert rec['capability_decision']['uses']['sanitize_log'].startswith('Get Log Page')
    assert not [c for c in ctrl.commands()[before:] if c['queue'] == 'io'
                and c['opcode'] == 0x08]

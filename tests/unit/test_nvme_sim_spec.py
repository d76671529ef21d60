"""The simulator refuses what a controller that follows the NVMe Base Specification
2.0 (and the NVM Command Set Specification 1.0) refuses, with the status it gives:
one case per rule, each driven through the real nvme-cli binary, each run twice:
on a controller that does not advertise the capability (refused, with the status)
and on one that does (the same command line succeeds), so a simulator refusing
everything fails here too.

Status values are as nvme-cli prints them (DNR bit 0x4000 kept): 0x4001 Invalid
Command Opcode, 0x4002 Invalid Field in Command, 0x400b Invalid Namespace or Format
(Figure "Generic Command Status Values"); 0x4109 Invalid Log Page, 0x411c Controller
List Invalid (command specific status values of Get Log Page and Namespace
Attachment).
"""
import dataclasses
import json
import subprocess

import pytest

from tests.nvme_sim import presets, simulation_for_test

MiB = 2 ** 20


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    section: str            # where the specification says so
    refused: dict           # add_controller() arguments of a controller that refuses
    allowed: dict           # ... of one that accepts the same command line
    args: tuple             # nvme-cli arguments; {ctrl} and {ns1} are filled in
    status: int

    def __str__(self):
        return self.name


RULES = [
    Rule('sanitize-log-without-sanitize',
         '§5.16 Figure "Log Page Identifiers": Sanitize Status (81h) mandatory only '
         'with the Sanitize command (SANICAP bits 2:0)',
         dict(ces=False, bes=False), dict(ces=False, bes=True),
         ('sanitize-log', '{ctrl}'), 0x4109),
    Rule('sanitize-without-sanitize',
         'Figure "Opcodes for Admin Commands": Sanitize (84h) optional; SANICAP 0',
         dict(ces=False, bes=False), dict(ces=False, bes=True),
         ('sanitize', '{ctrl}', '-a', '2'), 0x4001),
    Rule('sanitize-action-not-in-sanicap',
         '§5.24: a Sanitize Action SANICAP does not report',
         dict(ces=False, bes=True), dict(ces=True, bes=True),
         ('sanitize', '{ctrl}', '-a', '4'), 0x4002),
    Rule('sanitize-reserved-sanact',
         '§5.24 Figure "Sanitize - Command Dword 10": SANACT 5h reserved',
         dict(), dict(),
         ('admin-passthru', '{ctrl}', '--opcode=0x84', '--cdw10={cdw10}'), 0x4002),
    Rule('sanitize-reserved-cdw10-bits',
         '§5.24 Figure "Sanitize - Command Dword 10": bits 31:10 reserved',
         dict(), dict(),
         ('admin-passthru', '{ctrl}', '--opcode=0x84', '--cdw10={cdw10b}'), 0x4002),
    Rule('sanitize-ndas-with-ndi',
         '§5.24 + SANICAP bit 29 (NDI): No-Deallocate After Sanitize with NDI set and '
         'No-Deallocate Response Mode 0',
         dict(sanicap_extra=0x20000000), dict(),
         ('sanitize', '{ctrl}', '-a', '2', '-d'), 0x4002),
    Rule('format-without-oacs-bit1',
         'OACS bit 1: Format NVM (80h) optional',
         dict(format_nvm=False), dict(),
         ('format', '{ctrl}', '-n', '1', '--ses=1', '--force'), 0x4001),
    Rule('format-crypto-without-fna-bit2',
         '§5.14 Figure "Format NVM - Command Dword 10": SES 010b needs FNA bit 2',
         dict(fna=0x0), dict(fna=0x4),
         ('format', '{ctrl}', '-n', '1', '--ses=2', '--force'), 0x4002),
    Rule('format-reserved-ses',
         '§5.14 Figure "Format NVM - Command Dword 10": SES 011b..111b reserved',
         dict(), dict(),
         ('format', '{ctrl}', '-n', '1', '--ses={ses}', '--force'), 0x4002),
    Rule('format-broadcast-with-fnvmbs',
         '§5.14 / FNA bit 3 (FNVMBS): NSID FFFFFFFFh not supported for Format NVM',
         dict(fna=0x8), dict(fna=0x0),
         ('format', '{ctrl}', '-n', '0xffffffff', '--ses=1', '--force'), 0x400b),
    Rule('create-ns-without-oacs-bit3',
         '§5.23 Namespace Management (0Dh) optional: OACS bit 3',
         dict(ns_mgmt=False), dict(),
         ('create-ns', '{ctrl}', '-s', '2048', '-c', '2048', '-f', '0'), 0x4001),
    Rule('attach-ns-without-oacs-bit3',
         '§5.22 Namespace Attachment (15h) optional: OACS bit 3',
         dict(ns_mgmt=False), dict(),
         ('attach-ns', '{ctrl}', '-n', '2', '-c', '0'), 0x4001),
    Rule('attach-to-another-controller',
         '§5.22: a controller list naming a controller that is not this one',
         dict(), dict(),
         ('attach-ns', '{ctrl}', '-n', '2', '-c', '{cntlid}'), 0x411c),
    Rule('cns-02h-before-nvme-1.1',
         '§5.17.1 Figure "CNS Values": CNS 02h (active namespace list) since 1.1',
         dict(version=0x10000), dict(version=0x10100),
         ('list-ns', '{ctrl}'), 0x4002),
    Rule('cns-03h-before-nvme-1.3',
         '§5.17.1 Figure "CNS Values": CNS 03h (namespace descriptors) since 1.3',
         dict(version=0x10200), dict(version=0x10300),
         ('ns-descs', '{ns1}'), 0x4002),
    Rule('cns-10h-without-ns-mgmt',
         '§5.17.1 Figure "CNS Values": CNS 10h..13h need Namespace Management',
         dict(ns_mgmt=False), dict(),
         ('list-ns', '{ctrl}', '-a'), 0x4002),
    Rule('cns-13h-without-ns-mgmt',
         '§5.17.1 Figure "CNS Values": CNS 13h (controller list)',
         dict(ns_mgmt=False), dict(),
         ('list-ctrl', '{ctrl}'), 0x4002),
    Rule('id-ns-broadcast-without-ns-mgmt',
         '§5.17.2.1: Identify Namespace NSID FFFFFFFFh needs Namespace Management',
         dict(ns_mgmt=False), dict(),
         ('id-ns', '{ctrl}', '-n', '0xffffffff'), 0x400b),
    Rule('write-zeroes-without-oncs-bit3',
         'NVM Command Set Figure "Opcodes": Write Zeroes (08h) optional, ONCS bit 3',
         dict(wzs=False), dict(),
         ('write-zeroes', '{ns1}', '-s', '0', '-c', '7'), 0x4001),
    Rule('write-zeroes-beyond-wzsl',
         'NVM Command Set §4.1.5.1 WZSL: more than 2^WZSL * CAP.MPSMIN',
         dict(wzsl=1), dict(wzsl=2),
         ('write-zeroes', '{ns1}', '-s', '0', '-c', '16'), 0x4002),
    Rule('read-beyond-mdts',
         'Identify Controller MDTS: a transfer beyond 2^MDTS * CAP.MPSMIN',
         dict(mdts=1), dict(mdts=2),
         ('read', '{ns1}', '-s', '0', '-c', '31', '-z', '16384', '-d', '/dev/null'),
         0x4002),
    Rule('dsm-without-oncs-bit2',
         'NVM Command Set: Dataset Management (09h) optional, ONCS bit 2',
         dict(dsm=False), dict(),
         ('dsm', '{ns1}', '-d', '-s', '0', '-b', '8'), 0x4001),
    Rule('verify-without-oncs-bit7',
         'NVM Command Set: Verify (0Ch) optional, ONCS bit 7',
         dict(verify=False), dict(verify=True),
         ('verify', '{ns1}', '-s', '0', '-c', '7'), 0x4001),
    Rule('effects-log-without-lpa-bit1',
         '§5.16 Figure "Log Page Identifiers": Commands Supported and Effects (05h) '
         'optional, LPA bit 1',
         dict(lpa=0x0), dict(lpa=0x2),
         ('get-log', '{ctrl}', '--log-id=5', '--log-len=4096'), 0x4109),
    Rule('smart-per-namespace-without-lpa-bit0',
         '§5.16.1.3: SMART / Health per namespace needs LPA bit 0',
         dict(lpa=0x2), dict(lpa=0x3),
         ('smart-log', '{ctrl}', '-n', '1'), 0x4002),
    Rule('log-offset-without-lpa-bit2',
         '§5.16 Figure "Get Log Page - Command Dword 12/13": LPO needs LPA bit 2 '
         '(extended data)',
         dict(lpa=0x2), dict(lpa=0x6),
         ('get-log', '{ctrl}', '--log-id=2', '--log-len=256', '--lpo=4'), 0x4002),
]


@pytest.fixture
def sim(tmp_path):
    s = simulation_for_test(tmp_path)
    yield s
    s.close()


def _args(rule, ctrl, sim, **override):
    fill = {'ctrl': ctrl.char_path, 'ns1': f'{sim.dev_root}/{ctrl.name}n1',
            'cdw10': '5', 'cdw10b': str(0x802), 'ses': '3', 'cntlid': '7', **override}
    return [a.format(**fill) for a in rule.args]


# A reserved value has no "allowed" twin: there the valid neighbour is tried.
NEIGHBOUR = {'sanitize-reserved-sanact': {'cdw10': '2'},
             'sanitize-reserved-cdw10-bits': {'cdw10b': '2'},
             'format-reserved-ses': {'ses': '1'},
             'attach-to-another-controller': {'cntlid': '0'}}


@pytest.mark.parametrize('rule', RULES, ids=str)
def test_rule(sim, rule):
    # Namespace 2 is attached; the attachment rules detach it on the accepting side.
    base = dict(namespaces=[4 * MiB, 4 * MiB], capacity=16 * MiB, sanitize_seconds=0.05)
    refused = sim.add_controller(address='0000:0a:00.0', **{**base, **rule.refused})
    r = sim.nvme(*_args(rule, refused, sim))
    assert r.returncode == 1 and r.stdout == '', (rule.section, r.stdout, r.stderr)
    assert f'({rule.status:#x})' in r.stderr, (rule.section, r.stderr)

    allowed = sim.add_controller(address='0000:0b:00.0', **{**base, **rule.allowed})
    if rule.name.startswith('attach'):
        assert sim.nvme('detach-ns', allowed.char_path, '-n', '2', '-c', '0').returncode == 0
    args = _args(rule, allowed, sim, **NEIGHBOUR.get(rule.name, {}))
    ok = sim.nvme(*args)
    assert ok.returncode == 0, (rule.section, args, ok.stderr)
    allowed.wait_sanitize()


def test_every_refusal_is_logged_with_its_status(sim):
    """What the tests above see in nvme-cli's words is the status the controller
    completed the command with (the command log), not a message of nvme-cli's own."""
    ctrl = sim.add_controller(ces=False, bes=False, namespaces=[4 * MiB])
    sim.nvme('sanitize-log', ctrl.char_path)
    last = ctrl.commands()[-1]
    assert (last['queue'], last['opcode'], last['cdw10'] & 0xff, last['status']) == \
        ('admin', 0x02, 0x81, 0x4109)


def test_format_scope_fna_bit0_formats_every_namespace(sim):
    """§5.14 Figure "Format NVM Operation Scope": with FNA bit 0 a format sent to one
    namespace formats all of them (and only with it)."""
    for address, fna, other_erased in (('0000:0a:00.0', 0x1, True),
                                       ('0000:0b:00.0', 0x0, False)):
        ctrl = sim.add_controller(address=address, namespaces=[MiB, MiB], fna=fna)
        ctrl.write(0, b'tenant' * 100, nsid=2)
        r = sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=1', '--force')
        assert r.returncode == 0, r.stderr
        assert (ctrl.find_on_media(b'tenant' * 100) == []) is other_erased


@pytest.mark.parametrize('dlfeat,zeroed', [(0x9, True), (0x0, False)])
def test_deallocate_reads_what_dlfeat_says(sim, dlfeat, zeroed):
    """Dataset Management deallocate: DLFEAT bits 2:0 = 001b promise zeroes; 000b
    promises nothing, and the simulated drive keeps the old bytes (an unmap only)."""
    ctrl = sim.add_controller(namespaces=[MiB], dlfeat=dlfeat)
    ctrl.write(0, b'\xab' * 4096)
    r = sim.nvme('dsm', f'{sim.dev_root}/{ctrl.name}n1', '-d', '-s', '0', '-b', '8')
    assert r.returncode == 0, r.stderr
    assert (ctrl.read(0, 4096) == bytes(4096)) is zeroed


def test_blkdiscard_without_dataset_management_is_not_supported(sim):
    """The kernel gives a namespace discard support only with ONCS bit 2."""
    ctrl = sim.add_controller(namespaces=[MiB], dsm=False)
    node = f'{sim.dev_root}/{ctrl.name}n1'
    r = subprocess.run(['blkdiscard', '--force', node], env=sim.environ(),
                       capture_output=True, text=True, check=False)
    assert r.returncode != 0 and 'not supported' in r.stderr.lower(), r.stderr
    ctrl.update(dsm=True)
    r = subprocess.run(['blkdiscard', '--force', node], env=sim.environ(),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize('name', presets.NAMES)
def test_a_preset_reports_its_models_identify_data(sim, name):
    """nvme id-ctrl on a preset shows the model's values (the bits the simulator
    models: OACS 1/3, ONCS 2/3/7, LPA 0-2)."""
    p = presets.get(name)
    ctrl = sim.add_controller(preset=name, namespaces=[4 * MiB])
    r = sim.nvme('id-ctrl', ctrl.char_path, '-o', 'json')
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d['mn'].strip() == p['model'] and d['ver'] == p['version']
    assert (d['mdts'], d['nn'], d['fna']) == (p['mdts'], p['max_namespaces'], p['fna'])
    assert d['sanicap'] & 0xffffffff == p['sanicap_extra'] | p['ces'] | p['bes'] << 1
    assert d['oacs'] == p['format_nvm'] << 1 | p['ns_mgmt'] << 3
    assert d['oncs'] == p['dsm'] << 2 | p['wzs'] << 3 | p['verify'] << 7
    assert d['lpa'] == p['lpa'] & 0x7


# --- Format NVM (§5.14) beyond the refusals above: what it erases, and while it runs
def test_format_user_data_erase_erases_the_namespace_in_scope_only(sim):
    """SES 001b: all user data of the namespace formatted is erased; with FNA bit 0
    clear the other namespace keeps its data."""
    ctrl = sim.add_controller(namespaces=[MiB, MiB], fna=0x0)
    for nsid in (1, 2):
        ctrl.write(0, b'tenant%d' % nsid * 100, nsid=nsid)
    r = sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=1', '--force')
    assert r.returncode == 0, r.stderr
    assert ctrl.find_on_media(b'tenant1' * 100) == []
    assert ctrl.find_on_media(b'tenant2' * 100) != []


def test_crypto_erase_changes_the_key_so_old_data_reads_as_other_bytes(sim):
    """SES 010b: the media key changes; the old blocks read back as neither the old
    bytes nor (necessarily) zeroes."""
    ctrl = sim.add_controller(namespaces=[MiB], fna=0x4)
    ctrl.write(0, b'\xab' * MiB)
    r = sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=2', '--force')
    assert r.returncode == 0, r.stderr
    data = ctrl.read(0, MiB)
    assert data.count(0xab) < MiB // 64 and data != bytes(MiB)


def test_fna_bit1_widens_a_crypto_erase_but_not_the_lba_format(sim):
    """FNA bit 1: a cryptographic erase of one namespace erases all of them; the LBA
    format change of the command stays with the namespace named (that is FNA bit 0)."""
    ctrl = sim.add_controller(namespaces=[MiB, MiB], fna=0x6)
    ctrl.write(0, b'other-ns' * 100, nsid=2)
    r = sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=2', '-l', '1', '--force')
    assert r.returncode == 0, r.stderr
    assert ctrl.find_on_media(b'other-ns' * 100) == []
    assert [ns['block_size'] for ns in ctrl.namespaces()] == [4096, 512]
    # a user data erase is not widened by FNA bit 1
    ctrl.write(0, b'other-ns' * 100, nsid=2)
    assert sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=1', '--force').returncode == 0
    assert ctrl.find_on_media(b'other-ns' * 100) != []


def test_format_in_progress(sim):
    """NVM Command Set Figure "Generic Command Status Values" 84h Format In Progress:
    while a Format NVM runs, I/O to the namespace it formats and another Format NVM
    complete with it; Identify and I/O to a namespace outside its scope go on."""
    ctrl = sim.add_controller(namespaces=[MiB, MiB], fna=0x0)
    ctrl.write(0, b'\xab' * 4096)
    ctrl.update(format_seconds=2.0)
    fmt = subprocess.Popen([sim.nvme_cli, 'format', ctrl.char_path, '-n', '1', '--ses=1',
                            '--force'], env=sim.environ(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        import time
        deadline = time.monotonic() + 10
        while int(ctrl._state().get('fmt_until', 0) or 0) == 0:
            assert time.monotonic() < deadline and fmt.poll() is None
            time.sleep(0.02)
        ns1, ns2 = (f'{sim.dev_root}/{ctrl.name}n{i}' for i in (1, 2))
        busy = [sim.nvme('read', ns1, '-s', '0', '-c', '0', '-z', '512'),
                sim.nvme('format', ctrl.char_path, '-n', '2', '--ses=1', '--force')]
        free = [sim.nvme('id-ctrl', ctrl.char_path),
                sim.nvme('read', ns2, '-s', '0', '-c', '0', '-z', '512')]
        assert fmt.poll() is None, 'the format ended before the checks'
    finally:
        out, err = fmt.communicate(timeout=30)
    for r in busy:
        assert r.returncode == 1 and '(0x84)' in r.stderr, r.stderr
    for r in free:
        assert r.returncode == 0, r.stderr
    assert fmt.returncode == 0, err
    assert ctrl.read(0, 4096) == bytes(4096)
    assert sim.nvme('read', ns1, '-s', '0', '-c', '0', '-z', '512').returncode == 0

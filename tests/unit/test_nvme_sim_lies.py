"""Drives that lie: sanitize, Write Zeroes (and the kernel's BLKZEROOUT) and Format NVM
that report success and erase nothing, driven through the real nvme-cli and util-linux
blkdiscard under the simulation."""
import shutil
import subprocess
import time

import pytest

from tests.nvme_sim import SimError, Simulation
from tests.unit.test_nvme_sim import MiB, fails, ok, sanitize_log

BLKDISCARD = shutil.which('blkdiscard', path='/usr/sbin:/sbin:/usr/bin') or \
    '/usr/sbin/blkdiscard'
NEEDLE = b'LEFT-BY-THE-TENANT' * 28                          # 504 bytes


@pytest.fixture
def sim(tmp_path):
    with Simulation(tmp_path) as s:
        yield s


def spray(ctrl):
    """The needle at the start and end of every namespace and of the free media."""
    for ns in ctrl.namespaces():
        ctrl.write(0, NEEDLE, nsid=ns['nsid'])
        ctrl.write(ns['size'] - 512, NEEDLE, nsid=ns['nsid'])
    free = ctrl.free_size()
    if free:
        ctrl.write_free(0, NEEDLE)
        ctrl.write_free(free - 512, NEEDLE)
    return len(ctrl.find_on_media(NEEDLE))


def blkdiscard(sim, *args):
    return subprocess.run([BLKDISCARD, *map(str, args)], env=sim.environ(),
                          capture_output=True, text=True, timeout=60, check=False)


def watch_sanitize(sim, ctrl, timeout=10):
    """The Sanitize Status log through nvme-cli until the sanitize ends: [(sstat, sprog)]."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        log = sanitize_log(sim, ctrl)
        status = log['sstat']['status']
        seen.append((status, log['sprog']))
        if status != '(2) Sanitize in Progress.':
            return seen, log
        assert time.monotonic() < deadline, seen
        time.sleep(0.02)


# ------------------------------------------------------------------ sanitize

# Each preset (tests/nvme_sim/presets.py) with the sanitize action it advertises.
@pytest.mark.parametrize('preset,sanact', [(None, '2'), (None, '4'),
                                           ('enterprise_crypto_block', '4'),
                                           ('block_erase', '2')])
def test_lying_sanitize_runs_its_course_reports_success_erases_nothing(sim, preset, sanact):
    ctrl = sim.add_controller(namespaces=[4 * MiB], capacity=6 * MiB, sanitize_seconds=0.6,
                              lie_sanitize=True, preset=preset)
    before = spray(ctrl)
    assert before == 4
    data = ctrl.read(0, 4 * MiB)
    assert sanitize_log(sim, ctrl)['sstat']['global_erased'] == 0
    ok(sim, 'sanitize', ctrl.char_path, '-a', sanact)
    assert ctrl.sanitize_state()['mode'] == 'lie'
    fails(sim, 'sanitize', ctrl.char_path, '-a', sanact, status=0x1d)    # busy, like a drive
    seen, log = watch_sanitize(sim, ctrl)
    progress = [p for s, p in seen if s == '(2) Sanitize in Progress.']
    assert progress == sorted(progress) and any(0 < p < 65535 for p in progress), seen
    assert log['sstat'] == {'global_erased': 1, 'no_cmplted_passes': 0,
                            'status': '(1) Most Recent Sanitize Command Completed Successfully.'}
    assert log['sprog'] == 65535
    assert ctrl.sanitize_state()['status'] == 'success'
    assert len(ctrl.find_on_media(NEEDLE)) == before
    assert ctrl.read(0, 4 * MiB) == data


def test_lie_is_decided_when_the_sanitize_starts(sim):
    ctrl = sim.add_controller(namespaces=[2 * MiB], sanitize_seconds=0.5)
    spray(ctrl)
    ctrl.update(lie_sanitize=True)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    ctrl.update(lie_sanitize=False)             # too late for the one running
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert len(ctrl.find_on_media(NEEDLE)) == 2
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.find_on_media(NEEDLE) == []


def test_one_shot_sanitize_lie(sim):
    ctrl = sim.add_controller(namespaces=[2 * MiB], capacity=3 * MiB, sanitize_seconds=0.1)
    spray(ctrl)
    ctrl.inject_sanitize_lie()
    ok(sim, 'sanitize', ctrl.char_path, '-a', '4')
    state = ctrl.wait_sanitize()
    assert (state['status'], state['global_data_erased']) == ('success', True)
    assert len(ctrl.find_on_media(NEEDLE)) == 4
    ok(sim, 'sanitize', ctrl.char_path, '-a', '4')               # only the next one lied
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.find_on_media(NEEDLE) == []
    with pytest.raises(SimError):
        ctrl.inject_sanitize_lie(times=0)


def test_lie_under_a_hang_or_failure(sim):
    ctrl = sim.add_controller(namespaces=[MiB], sanitize_seconds=0.1, lie_sanitize=True)
    spray(ctrl)
    ctrl.inject_sanitize_failure()              # an injected failure still fails
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    assert ctrl.wait_sanitize()['status'] == 'failed'
    ctrl.inject_sanitize_hang()
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    ctrl.release_sanitize_hang()                # the released drive is still a liar
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert len(ctrl.find_on_media(NEEDLE)) == 2


# ------------------------------------------------------------------ write zeroes

def test_blkdiscard_zeroout_zeroes_exactly_its_range(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB, MiB], capacity=6 * MiB)
    spray(ctrl)
    ctrl.write(MiB - 512, NEEDLE)
    ctrl.write(2 * MiB, NEEDLE)
    node = ctrl.namespace_paths()[0]
    r = blkdiscard(sim, '--zeroout', '--force', '--offset', MiB, '--length', MiB, node)
    assert r.returncode == 0, r.stderr
    assert ctrl.read(MiB, MiB) == bytes(MiB)
    assert ctrl.read(MiB - 512, len(NEEDLE)) == NEEDLE          # just before the range
    assert ctrl.read(2 * MiB, len(NEEDLE)) == NEEDLE            # just after it
    r = blkdiscard(sim, '--zeroout', '--force', node)
    assert r.returncode == 0, r.stderr
    assert ctrl.read(0, 4 * MiB) == bytes(4 * MiB)
    # only its namespace: the other one and the free media keep theirs
    assert sorted((p.rsplit('/', 1)[1], at) for p, at in ctrl.find_on_media(NEEDLE)) == \
        [('free.img', 0), ('free.img', MiB - 512), ('ns2.img', 0), ('ns2.img', MiB - 512)]
    names = [c.get('name') for c in ctrl.commands() if c['queue'] == 'ioctl']
    assert names.count('blkzeroout') == 2


@pytest.mark.parametrize('preset', [None, 'client_format', 'write_zeroes_dealloc'])
def test_lying_write_zeroes_through_nvme_cli_and_blkzeroout(sim, preset):
    ctrl = sim.add_controller(namespaces=[2 * MiB], lie_write_zeroes=True, preset=preset)
    spray(ctrl)
    node = ctrl.namespace_paths()[0]
    assert ok(sim, 'write-zeroes', node, '-s', '0', '-c', '4095').strip() == \
        'NVME Write Zeroes Success'
    r = blkdiscard(sim, '--zeroout', '--force', node)
    assert r.returncode == 0, r.stderr
    assert len(ctrl.find_on_media(NEEDLE)) == 2
    wz = [c for c in ctrl.commands() if c.get('opcode') == 0x08 and c['queue'] == 'io']
    assert [c['status'] for c in wz] == [0]
    ctrl.update(lie_write_zeroes=False)
    ok(sim, 'write-zeroes', node, '-s', '0', '-c', '0')
    assert ctrl.read(0, 512) == bytes(512)
    assert blkdiscard(sim, '--zeroout', '--force', node).returncode == 0
    assert ctrl.find_on_media(NEEDLE) == []


@pytest.mark.parametrize('preset', [None, 'minimal'])
def test_without_write_zeroes_the_kernel_writes_zero_pages(sim, preset):
    # BLKZEROOUT on a controller without Write Zeroes never reaches the liar's firmware
    ctrl = sim.add_controller(namespaces=[MiB], wzs=False, lie_write_zeroes=True,
                              preset=preset)
    spray(ctrl)
    fails(sim, 'write-zeroes', ctrl.namespace_paths()[0], '-s', '0', '-c', '0', status=0x4001)
    assert blkdiscard(sim, '--zeroout', '--force', ctrl.namespace_paths()[0]).returncode == 0
    assert ctrl.find_on_media(NEEDLE) == []


# ------------------------------------------------------------------ format

@pytest.mark.parametrize('preset,ses', [(None, '1'), (None, '2'), ('client_format', '2'),
                                        ('write_zeroes_dealloc', '1')])
def test_lying_format_reports_success_and_erases_nothing(sim, preset, ses):
    ctrl = sim.add_controller(namespaces=[MiB], lie_format=True, preset=preset)
    spray(ctrl)
    assert ok(sim, 'format', ctrl.char_path, '-n', '1', f'--ses={ses}', '-l', '1',
              '--force').strip() == 'Success formatting namespace:1'
    assert ctrl.namespaces()[0]['block_size'] == 4096          # the format itself happened
    assert len(ctrl.find_on_media(NEEDLE)) == 2
    ctrl.update(lie_format=False)
    ok(sim, 'format', ctrl.char_path, '-n', '1', f'--ses={ses}', '--force')
    assert ctrl.find_on_media(NEEDLE) == []

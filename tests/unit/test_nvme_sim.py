"""The simulated NVMe controller, driven through the real nvme-cli binary.

Every command here runs /usr/sbin/nvme (nvme-cli 2.3) in a subprocess under the LD_PRELOAD
shim; assertions are on nvme-cli's own output, on the backing files and on the commands
the shim recorded.
"""
import concurrent.futures
import json
import mmap
import os
import shutil
import signal
import stat
import subprocess
import time

import pytest

from steward.drivers.pci import sysfs as pci_sysfs
from tests.fixtures import requirements
from tests.nvme_sim import BuildError, SimError, Simulation, build

MiB = 2**20
PATTERN = b'TENANT-SECRET-0123456789abcdef!!' * 16          # 512 bytes


@pytest.fixture
def sim(tmp_path):
    with Simulation(tmp_path) as s:
        yield s


def ok(sim, *args):
    r = sim.nvme(*args)
    assert r.returncode == 0, f'nvme {args}: rc={r.returncode} {r.stderr}'
    return r.stdout


def js(sim, *args):
    return json.loads(ok(sim, *args, '-o', 'json'))


def fails(sim, *args, status=None):
    r = sim.nvme(*args)
    assert r.returncode == 1 and r.stdout == '', (args, r.stdout, r.stderr)
    if status is not None:
        assert f'({status:#x})' in r.stderr, r.stderr
    return r.stderr


def fill(ctrl, byte=b'\xab'):
    for ns in ctrl.namespaces():
        ctrl.write(0, byte * ns['size'], nsid=ns['nsid'])


def sanitize_log(sim, ctrl):
    return js(sim, 'sanitize-log', ctrl.char_path)[ctrl.name]


# ------------------------------------------------------------------ build

def test_build_is_warning_free_and_cached(tmp_path):
    fresh = build.build.__wrapped__(tmp_path)
    assert fresh.shim.exists() and fresh.tool.exists()
    assert 'warning' not in fresh.compiler_output, fresh.compiler_output
    again = build.build.__wrapped__(tmp_path)
    assert again.shim == fresh.shim and again.compiler_output == ''


def test_build_without_gcc_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv('CC', str(tmp_path / 'no-such-gcc'))
    with pytest.raises(BuildError, match='gcc not found.*apt-get install gcc'):
        build.build.__wrapped__(tmp_path)


# ------------------------------------------------------------------ layout

def test_sysfs_and_dev_nodes_in_kernel_layout(sim):
    ctrl = sim.add_controller(address='0000:0a:00.0', namespaces=[8 * MiB, 4 * MiB],
                              serial='SN-LAYOUT', model='Layout Model', firmware='FW1')
    sys = sim.sysfs_root
    dev = pci_sysfs.read_device(sys, '0000:0a:00.0')
    assert (dev.vendor_id, dev.product_id, dev.class_code, dev.driver) == \
        ('8086', '0a54', '010802', 'nvme')
    bus = os.path.join(sys, 'bus/pci/devices/0000:0a:00.0')
    assert os.listdir(os.path.join(bus, 'nvme')) == ['nvme0']
    cdir = os.path.join(bus, 'nvme/nvme0')
    attrs = {a: open(os.path.join(cdir, a)).read() for a in
             ('address', 'serial', 'model', 'firmware_rev', 'state', 'transport', 'dev')}
    assert attrs == {'address': '0000:0a:00.0\n', 'serial': 'SN-LAYOUT'.ljust(20) + '\n',
                     'model': 'Layout Model'.ljust(40) + '\n', 'firmware_rev': 'FW1     \n',
                     'state': 'live\n', 'transport': 'pcie\n', 'dev': '241:0\n'}
    cls = os.path.join(sys, 'class/nvme/nvme0')
    assert os.path.realpath(cls) == os.path.realpath(cdir)
    assert os.path.basename(os.readlink(os.path.join(cls, 'device'))) == '0000:0a:00.0'
    for nsid, size in ((1, 8 * MiB), (2, 4 * MiB)):
        ndir = os.path.join(cdir, f'nvme0n{nsid}')
        assert open(os.path.join(ndir, 'nsid')).read() == f'{nsid}\n'
        assert int(open(os.path.join(ndir, 'size')).read()) * 512 == size
        assert open(os.path.join(ndir, 'queue/logical_block_size')).read() == '512\n'
        assert os.listdir(os.path.join(ndir, 'holders')) == []
        assert os.path.realpath(os.path.join(sys, f'class/block/nvme0n{nsid}')) == \
            os.path.realpath(ndir)
    assert ctrl.char_path == os.path.join(sim.dev_root, 'nvme0')
    if sim.node_kind == 'mknod':
        assert stat.S_ISCHR(os.stat(ctrl.char_path).st_mode)
    paths = ctrl.namespace_paths()
    assert paths == [os.path.join(sim.dev_root, 'nvme0n1'), os.path.join(sim.dev_root, 'nvme0n2')]
    assert [os.path.getsize(p) for p in paths] == [8 * MiB, 4 * MiB]


def test_namespace_node_is_the_data_the_host_path_sees(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB])
    node = ctrl.namespace_paths()[0]
    ctrl.write(8192, PATTERN)
    fd = os.open(node, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    try:
        assert os.preadv(fd, [buf], 8192) == 4096
    finally:
        os.close(fd)
    assert buf[:len(PATTERN)] == PATTERN
    fd = os.open(node, os.O_WRONLY)
    try:
        os.pwrite(fd, b'\0' * 4096, 8192)
    finally:
        os.close(fd)
    assert ctrl.read(8192, len(PATTERN)) == b'\0' * len(PATTERN)


def test_shim_disguises_nodes_for_processes_under_it(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB], block_size=4096)
    node = ctrl.namespace_paths()[0]
    probe = ('import os, stat, sys\n'
             'for p in sys.argv[1:]:\n'
             '    st = os.stat(p); print(stat.S_ISBLK(st.st_mode), stat.S_ISCHR(st.st_mode),'
             ' os.major(st.st_rdev))\n')
    r = subprocess.run([shutil.which('python3'), '-c', probe, node, ctrl.char_path],
                       env=sim.environ(), capture_output=True, text=True, check=True)
    assert r.stdout.split('\n')[:2] == ['True False 259', 'False True 241']
    r = subprocess.run(['blockdev', '--getsize64', '--getss', node], env=sim.environ(),
                       capture_output=True, text=True, check=True)
    assert r.stdout.split() == [str(4 * MiB), '4096']
    # shred, the spec's host-side fallback, runs against the node as a block device
    ctrl.write(0, PATTERN)
    subprocess.run(['shred', '-n', '0', '-z', node], env=sim.environ(), check=True)
    assert ctrl.read(0, 4 * MiB) == bytes(4 * MiB)


def test_descriptors_outside_the_simulation_are_untouched(sim, tmp_path):
    sim.add_controller()
    other = tmp_path / 'elsewhere' / 'nvme0'
    other.parent.mkdir()
    try:
        os.mknod(other, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        requirements.need('nvme', 'mknod not permitted (needs root)')
    err = fails(sim, 'id-ctrl', str(other))
    assert 'Inappropriate ioctl for device' in err
    r = subprocess.run(['cat', '/proc/self/status'], env=sim.environ(), capture_output=True,
                       check=True)
    assert b'Name:' in r.stdout


# ------------------------------------------------------------------ identify

@pytest.mark.parametrize('ces,bes,wzs,ns_mgmt', [(True, True, True, True),
                                                  (False, True, False, True),
                                                  (True, False, True, False),
                                                  (False, False, False, False)])
def test_id_ctrl_reports_configured_capabilities(sim, ces, bes, wzs, ns_mgmt):
    ctrl = sim.add_controller(vendor_id='144d', product_id='a808', serial='S1234',
                              model='Sim Model X', firmware='2.0', namespaces=[16 * MiB],
                              capacity=32 * MiB, ces=ces, bes=bes, wzs=wzs, ns_mgmt=ns_mgmt)
    ic = js(sim, 'id-ctrl', ctrl.char_path)
    assert (ic['vid'], ic['ssvid']) == (0x144d, 0x144d)
    assert (ic['sn'], ic['mn'], ic['fr']) == ('S1234'.ljust(20), 'Sim Model X'.ljust(40),
                                               '2.0'.ljust(8))
    assert ic['sanicap'] & 1 == ces and (ic['sanicap'] >> 1) & 1 == bes
    assert (ic['oncs'] >> 3) & 1 == wzs
    assert (ic['oacs'] >> 3) & 1 == ns_mgmt
    assert ic['tnvmcap'] == str(32 * MiB)                    # 2.3: 128-bit as a string
    assert ic['unvmcap'] == (str(16 * MiB) if ns_mgmt else '0')


def test_id_ctrl_signed_sanicap_quirk_of_2_3(sim):
    ctrl = sim.add_controller(sanicap_extra=0xa0000000)
    ic = js(sim, 'id-ctrl', ctrl.char_path)
    assert ic['sanicap'] < 0 and ic['sanicap'] & 0xffffffff == 0xa0000003


def test_id_ns_and_namespace_lists(sim):
    ctrl = sim.add_controller(namespaces=[8 * MiB, 16 * MiB], block_size=4096)
    node1 = ctrl.namespace_paths()[0]
    by_node = js(sim, 'id-ns', node1)
    by_char = js(sim, 'id-ns', ctrl.char_path, '-n', '1')
    assert by_node == by_char
    assert by_node['nsze'] == by_node['ncap'] == 8 * MiB // 4096
    assert by_node['lbafs'][by_node['flbas'] & 0xf]['ds'] == 12
    assert by_node['nvmcap'] == str(8 * MiB)
    assert js(sim, 'id-ns', ctrl.char_path, '-n', '2')['nsze'] == 16 * MiB // 4096
    ok(sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    assert js(sim, 'list-ns', ctrl.char_path) == {'nsid_list': [{'nsid': 1}]}
    assert js(sim, 'list-ns', ctrl.char_path, '-a') == {'nsid_list': [{'nsid': 1}, {'nsid': 2}]}
    assert js(sim, 'id-ns', ctrl.char_path, '-n', '2')['nsze'] == 0     # inactive: zeroes
    assert js(sim, 'list-ctrl', ctrl.char_path) == {'num_ctrl': 1, 'ctrl_list': [{'ctrl_id': 0}]}
    fails(sim, 'id-ns', ctrl.char_path, '-n', '999', status=0x400b)


# ------------------------------------------------------------------ sanitize

@pytest.mark.parametrize('args,action', [(['-a', '4'], 'crypto'),
                                         (['--sanact=start-crypto-erase'], 'crypto'),
                                         (['-a', '2'], 'block'),
                                         (['--sanact=0x02', '--ause'], 'block')])
def test_sanitize_erases_every_namespace(sim, args, action):
    ctrl = sim.add_controller(namespaces=[4 * MiB, 2 * MiB], sanitize_seconds=0.2)
    for ns in ctrl.namespaces():
        for off in range(0, ns['size'], 64 * 1024):
            ctrl.write(off, PATTERN, nsid=ns['nsid'])
    assert sanitize_log(sim, ctrl)['sstat']['global_erased'] == 0
    assert ok(sim, 'sanitize', ctrl.char_path, *args) == ''
    state = ctrl.wait_sanitize()
    assert (state['status'], state['action']) == ('success', action)
    for ns in ctrl.namespaces():
        data = ctrl.read(0, ns['size'], nsid=ns['nsid'])
        assert PATTERN[:16] not in data
        if action == 'block':
            assert data == bytes(ns['size'])
        else:               # crypto: the old key is gone, the media reads as noise
            assert data.count(0) < len(data) // 64
    log = sanitize_log(sim, ctrl)
    assert log['sprog'] == 65535
    assert log['sstat'] == {'global_erased': 1, 'no_cmplted_passes': 0,
                            'status': '(1) Most Recent Sanitize Command Completed Successfully.'}
    assert log['cdw10_info'] & 7 == (4 if action == 'crypto' else 2)
    sent = [c for c in ctrl.commands() if c.get('opcode') == 0x84]
    assert len(sent) == 1 and sent[0]['cdw10'] == log['cdw10_info']


def test_sanitize_progress_and_what_is_refused_meanwhile(sim):
    ctrl = sim.add_controller(namespaces=[8 * MiB], sanitize_seconds=1.2)
    fill(ctrl)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    # in progress from the moment the command completed: what the spec refuses, is refused
    fails(sim, 'sanitize', ctrl.char_path, '-a', '4', status=0x1d)
    fails(sim, 'write-zeroes', ctrl.namespace_paths()[0], '-s', '0', '-c', '0', status=0x1d)
    fails(sim, 'delete-ns', ctrl.char_path, '-n', '1', status=0x1d)
    assert js(sim, 'id-ctrl', ctrl.char_path)['sn'].strip() == 'SIMSN0001'
    seen = []
    while True:
        log = sanitize_log(sim, ctrl)
        if log['sstat']['status'] != '(2) Sanitize in Progress.':
            break
        seen.append(log['sprog'])
        time.sleep(0.05)
    assert seen == sorted(seen) and any(0 < p < 65535 for p in seen), seen
    assert log['sstat']['status'] == '(1) Most Recent Sanitize Command Completed Successfully.'
    assert ctrl.read(0, 8 * MiB) == bytes(8 * MiB)
    assert [c['status'] for c in ctrl.commands() if c.get('opcode') == 0x84] == [0, 0x1d]


def test_injected_sanitize_failure_leaves_data_and_restricts(sim):
    ctrl = sim.add_controller(namespaces=[2 * MiB], sanitize_seconds=0.2)
    fill(ctrl)
    ctrl.inject_sanitize_failure()
    ok(sim, 'sanitize', ctrl.char_path, '-a', '4')     # the command itself is accepted
    state = ctrl.wait_sanitize()
    assert (state['sstat'], state['failure_mode']) == (3, 'restricted')
    assert sanitize_log(sim, ctrl)['sstat']['status'] == '(3) Most Recent Sanitize Command Failed.'
    assert ctrl.read(0, 2 * MiB) == b'\xab' * 2 * MiB
    fails(sim, 'write-zeroes', ctrl.namespace_paths()[0], '-s', '0', '-c', '0', status=0x1c)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '1', status=0x1c)    # restricted mode
    ok(sim, 'sanitize', ctrl.char_path, '-a', '4')     # a retry is what recovers
    state = ctrl.wait_sanitize()
    assert (state['sstat'], state['failure_mode']) == (1, None)
    assert b'\xab' * 64 not in ctrl.read(0, 2 * MiB)


def test_injected_sanitize_hang_never_finishes_until_released(sim):
    ctrl = sim.add_controller(namespaces=[2 * MiB], sanitize_seconds=0.1)
    fill(ctrl)
    ctrl.inject_sanitize_hang(progress=0.43)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    time.sleep(0.4)
    for _ in range(2):
        log = sanitize_log(sim, ctrl)
        assert log['sstat']['status'] == '(2) Sanitize in Progress.'
        assert log['sprog'] == int(0.43 * 65536)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '2', status=0x1d)
    assert ctrl.read(0, 2 * MiB) == b'\xab' * 2 * MiB
    ctrl.release_sanitize_hang()
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.read(0, 2 * MiB) == bytes(2 * MiB)


def test_sanitize_resumes_when_its_eraser_dies(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB], sanitize_seconds=2.0)
    fill(ctrl)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    deadline = time.monotonic() + 5
    while ctrl.sanitize_state()['eraser_pid'] is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(ctrl.sanitize_state()['eraser_pid'], signal.SIGKILL)
    time.sleep(0.1)
    state = ctrl.sanitize_state()
    assert state['in_progress'] and not state['eraser_alive']
    ctrl.update(sanitize_seconds=0.1)
    # like a drive after power loss: the next command finds the sanitize and resumes it
    assert sanitize_log(sim, ctrl)['sstat']['status'] == '(2) Sanitize in Progress.'
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.read(0, 4 * MiB) == bytes(4 * MiB)


def test_unsupported_sanitize_actions(sim):
    ctrl = sim.add_controller(ces=False, bes=True)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '4', status=0x4002)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '3', status=0x4002)
    assert 'Invalid Sanitize Action' in fails(sim, 'sanitize', ctrl.char_path, '-a', '5')
    assert [c['cdw10'] for c in ctrl.commands() if c.get('opcode') == 0x84] == [4, 3]
    assert ctrl.sanitize_state()['sstat'] == 0
    assert sanitize_log(sim, ctrl)['time_crypto_erase'] == -1     # not reported


def test_sanitize_command_dwords_as_sent(sim):
    ctrl = sim.add_controller(sanitize_seconds=0)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2', '-u', '-d')
    ctrl.wait_sanitize()
    assert [c['cdw10'] for c in ctrl.commands() if c.get('opcode') == 0x84] == [0x20a]


def test_eight_controllers_sanitize_in_parallel(sim):
    ctrls = [sim.add_controller(address=f'0000:{0x10 + i:02x}:00.0', namespaces=[8 * MiB],
                                sanitize_seconds=0.5) for i in range(8)]
    for i, ctrl in enumerate(ctrls):
        ctrl.write(0, bytes([i + 1]) * 8 * MiB)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(
            lambda c: sim.nvme('sanitize', c.char_path, '-a', '4' if c.index % 2 else '2'),
            ctrls))
    assert [r.returncode for r in results] == [0] * 8
    for i, ctrl in enumerate(ctrls):
        assert ctrl.wait_sanitize()['status'] == 'success'
        data = ctrl.read(0, 8 * MiB)
        assert bytes([i + 1]) * 64 not in data
        assert (data == bytes(8 * MiB)) == (i % 2 == 0)
        assert sanitize_log(sim, ctrl)['cdw10_info'] == (4 if i % 2 else 2)


# ------------------------------------------------------------------ write zeroes

@pytest.mark.parametrize('block', [512, 4096])
def test_write_zeroes_zeroes_exactly_the_range(sim, block):
    nblocks = 140000                                        # > 2 commands of 65536 blocks
    ctrl = sim.add_controller(namespaces=[nblocks * block], block_size=block)
    marked = ((0, 10), (65534, 2), (131070, 3), (nblocks - 2, 2))     # (first block, count)
    for first, count in marked:
        ctrl.write(first * block, b'\xab' * count * block)
    node = ctrl.namespace_paths()[0]
    assert ok(sim, 'write-zeroes', node, '-s', '3', '-c', '4').strip() == \
        'NVME Write Zeroes Success'
    data = ctrl.read(0, 10 * block)
    assert data[:3 * block] == b'\xab' * 3 * block
    assert data[3 * block:8 * block] == bytes(5 * block)          # NLB is zero-based
    assert data[8 * block:] == b'\xab' * 2 * block
    ok(sim, 'write-zeroes', ctrl.char_path, '-n', '1', '-s', '65535', '-c', '65535', '--deac')
    assert ctrl.read(65534 * block, 2 * block) == b'\xab' * block + bytes(block)
    assert ctrl.read(131070 * block, 3 * block) == bytes(block) + b'\xab' * 2 * block
    ok(sim, 'write-zeroes', ctrl.char_path, '-n', '1', '-s', '131072', '-c', '0')
    assert ctrl.read(131070 * block, 3 * block) == bytes(block) + b'\xab' * block + bytes(block)
    last = nblocks - 1
    ok(sim, 'write-zeroes', node, '-s', str(last), '-c', '0')
    fails(sim, 'write-zeroes', node, '-s', str(last), '-c', '1', status=0x4080)
    assert ctrl.read((last - 1) * block, 2 * block) == b'\xab' * block + bytes(block)
    wz = [c for c in ctrl.commands() if c.get('opcode') == 0x08 and c['queue'] == 'io']
    assert [(c['cdw10'], c['cdw12']) for c in wz] == \
        [(3, 4), (65535, 0x0200ffff), (131072, 0), (last, 0), (last, 1)]


def test_write_zeroes_unsupported(sim):
    ctrl = sim.add_controller(wzs=False)
    fails(sim, 'write-zeroes', ctrl.namespace_paths()[0], '-s', '0', '-c', '0', status=0x4001)


# ------------------------------------------------------------------ namespaces

def test_delete_all_then_one_full_size_namespace(sim):
    ctrl = sim.add_controller(namespaces=[8 * MiB, 4 * MiB, 4 * MiB])
    fill(ctrl)
    cdir = os.path.join(sim.sysfs_root, 'class/nvme/nvme0')
    assert ok(sim, 'delete-ns', ctrl.char_path, '-n', '0xffffffff').strip() == \
        'delete-ns: Success, deleted nsid:-1'
    assert ctrl.namespace_paths() == [] and ctrl.backing_files() == []
    assert not [e for e in os.listdir(cdir) if e.startswith('nvme0n')]
    assert js(sim, 'list-ns', ctrl.char_path, '-a') == {'nsid_list': []}
    ic = js(sim, 'id-ctrl', ctrl.char_path)
    assert ic['unvmcap'] == ic['tnvmcap'] == str(16 * MiB)
    blocks = int(ic['tnvmcap']) // 512
    assert ok(sim, 'create-ns', ctrl.char_path, '-s', blocks, '-c', blocks, '-f', '0').strip() \
        == 'create-ns: Success, created nsid:1'
    assert ctrl.namespace_paths() == []                     # allocated, not attached yet
    assert ok(sim, 'attach-ns', ctrl.char_path, '-n', '1', '-c', '0').strip() == \
        'attach-ns: Success, nsid:1'
    ok(sim, 'ns-rescan', ctrl.char_path)
    node = os.path.join(sim.dev_root, 'nvme0n1')
    assert ctrl.namespace_paths() == [node] and os.path.getsize(node) == 16 * MiB
    assert int(open(os.path.join(cdir, 'nvme0n1', 'size')).read()) == 16 * MiB // 512
    # on flash a new namespace maps the freed blocks: all three old namespaces' bytes
    assert ctrl.read(0, 16 * MiB) == b'\xab' * 16 * MiB
    assert os.path.getsize(ctrl.free_media_path()) == 0
    assert js(sim, 'id-ns', node)['nsze'] == blocks
    assert ok(sim, 'detach-ns', ctrl.char_path, '-n', '1', '-c', '0').strip() == \
        'detach-ns: Success, nsid:1'
    assert ctrl.namespace_paths() == [] and len(ctrl.backing_files()) == 1


def test_namespace_management_errors(sim):
    ctrl = sim.add_controller(namespaces=[8 * MiB], capacity=12 * MiB)
    fails(sim, 'create-ns', ctrl.char_path, '-s', 16384, '-c', 16384, '-f', '0', status=0x4115)
    out = ok(sim, 'create-ns', ctrl.char_path, '-s', 1024, '-c', 1024, '-b', '4096')
    assert out.strip() == 'create-ns: Success, created nsid:2'
    assert [ns['block_size'] for ns in ctrl.namespaces()] == [512, 4096]
    fails(sim, 'delete-ns', ctrl.char_path, '-n', '7', status=0x400b)
    fails(sim, 'attach-ns', ctrl.char_path, '-n', '1', '-c', '0', status=0x4118)
    fails(sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0', status=0x4119)
    fails(sim, 'attach-ns', ctrl.char_path, '-n', '2', '-c', '5', status=0x411c)
    assert ok(sim, 'delete-ns', ctrl.char_path, '-n', '2').strip() == \
        'delete-ns: Success, deleted nsid:2'
    plain = sim.add_controller(address='0000:0b:00.0', ns_mgmt=False)
    fails(sim, 'create-ns', plain.char_path, '-s', 8, '-c', 8, '-f', '0', status=0x4001)


def test_manual_rescan_controller(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB], auto_rescan=False)
    ok(sim, 'detach-ns', ctrl.char_path, '-n', '1', '-c', '0')
    assert len(ctrl.namespace_paths()) == 1                 # the kernel has not rescanned
    ok(sim, 'ns-rescan', ctrl.char_path)
    assert ctrl.namespace_paths() == []
    ok(sim, 'attach-ns', ctrl.char_path, '-n', '1', '-c', '0')
    assert ctrl.namespace_paths() == []
    ok(sim, 'ns-rescan', ctrl.char_path)
    assert len(ctrl.namespace_paths()) == 1


def test_format_user_data_and_crypto_erase(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB])
    fill(ctrl)
    assert ok(sim, 'format', ctrl.char_path, '-n', '1', '--ses=1', '-l', '1', '--force') \
        .strip() == 'Success formatting namespace:1'
    assert ctrl.read(0, 4 * MiB) == bytes(4 * MiB)
    assert ctrl.namespaces()[0]['block_size'] == 4096
    qdir = os.path.join(sim.sysfs_root, 'class/block/nvme0n1/queue/logical_block_size')
    assert open(qdir).read() == '4096\n'
    fill(ctrl)
    ok(sim, 'format', ctrl.char_path, '-n', '1', '--ses=2', '--force')
    data = ctrl.read(0, 4 * MiB)
    assert data.count(0xab) < 4 * MiB // 64 and data.count(0) < 4 * MiB // 64


# ------------------------------------------------------------------ faults

def test_injected_command_status(sim):
    ctrl = sim.add_controller()
    ctrl.inject(opcode=0x06, status=0x4286)
    assert 'Access Denied' in fails(sim, 'id-ctrl', ctrl.char_path, status=0x4286)
    ok(sim, 'id-ctrl', ctrl.char_path)                      # times=1: only the next one
    ctrl.inject(opcode=0x84, status=0x1d, times=2)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '4', status=0x1d)
    fails(sim, 'sanitize', ctrl.char_path, '-a', '4', status=0x1d)
    assert ctrl.sanitize_state()['sstat'] == 0              # nothing was started
    ctrl.inject(opcode=0x08, status=0x06, queue='io', skip=1, times=None)
    node = ctrl.namespace_paths()[0]
    ok(sim, 'write-zeroes', node, '-s', '0', '-c', '0')
    for _ in range(2):
        fails(sim, 'write-zeroes', node, '-s', '0', '-c', '0', status=0x06)
    ctrl.clear_injections()
    ok(sim, 'write-zeroes', node, '-s', '0', '-c', '0')
    injected = [(c['opcode'], c['status']) for c in ctrl.commands() if c.get('injected')]
    assert injected == [(0x06, 0x4286), (0x84, 0x1d), (0x84, 0x1d), (0x08, 0x06), (0x08, 0x06)]


def test_nvme_cli_removal(sim):
    ctrl = sim.add_controller()
    with sim.remove_nvme_cli() as path:
        assert path == sim.nvme_cli and shutil.which(path) is None
        with pytest.raises(FileNotFoundError):
            sim.nvme('id-ctrl', ctrl.char_path)
    assert shutil.which(sim.nvme_cli) == sim.nvme_cli
    sim.remove_nvme_cli()
    assert not os.path.lexists(sim.nvme_cli)
    sim.restore_nvme_cli()
    ok(sim, 'id-ctrl', ctrl.char_path)


def test_bad_parameters_are_refused(sim):
    sim.add_controller(address='0000:0a:00.0')
    with pytest.raises(SimError, match='already'):
        sim.add_controller(address='0000:0a:00.0')
    for kwargs, match in (({'address': 'nope'}, 'PCI address'),
                          ({'namespaces': [1000]}, 'multiple of 512'),
                          ({'block_size': 1024}, 'block_size'),
                          ({'serial': 'x' * 21}, 'serial'),
                          ({'vendor_id': 'zz'}, 'vendor_id'),
                          ({'namespaces': [8 * MiB], 'capacity': MiB}, 'capacity')):
        with pytest.raises(SimError, match=match):
            sim.add_controller(**{'address': '0000:0c:00.0', **kwargs})
    ctrl = sim.controller('nvme0')
    with pytest.raises(SimError, match='outside'):
        ctrl.write(64 * MiB - 1, b'xx')
    with pytest.raises(SimError, match='no namespace 3'):
        ctrl.read(0, 1, nsid=3)

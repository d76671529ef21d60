"""The simulated controller's whole media: namespaces and the free media (capacity no
namespace holds), as a tenant with admin control leaves them, driven through the real
nvme-cli (see tests/nvme_sim/README.md)."""
import os
import time

import pytest

from tests.nvme_sim import SimError, Simulation
from tests.nvme_sim.controller import find_in_file
from tests.unit.test_nvme_sim import MiB, fails, js, ok, sanitize_log


@pytest.fixture
def sim(tmp_path):
    with Simulation(tmp_path) as s:
        yield s


def mark(name):
    """A 512-byte block no other marker contains."""
    return (f'<{name}>'.encode() * 512)[:512]


def where(ctrl, needle):
    """{(file name, offset)} of every occurrence, for short assertions."""
    return {(os.path.basename(p), at) for p, at in ctrl.find_on_media(needle)}


def create(sim, ctrl, nbytes, fmt='0'):
    bs = 512 if fmt == '0' else 4096
    out = ok(sim, 'create-ns', ctrl.char_path, '-s', nbytes // bs, '-c', nbytes // bs,
             '-f', fmt)
    nsid = int(out.strip().rsplit(':', 1)[1])
    ok(sim, 'attach-ns', ctrl.char_path, '-n', nsid, '-c', '0')
    return nsid


def read_node(sim, node, block, out, size=512):
    """One block read through nvme-cli's Read command on the namespace node."""
    ok(sim, 'read', node, '-s', block, '-c', '0', '-z', size, '-d', out)
    with open(out, 'rb') as f:
        return f.read()


# ------------------------------------------------------------------ residue

def test_deleted_namespace_is_remapped_into_a_smaller_new_one(sim, tmp_path):
    ctrl = sim.add_controller(namespaces=[8 * MiB])
    a, b, c = mark('A'), mark('B'), mark('C')
    ctrl.write(0, a)
    ctrl.write(3 * MiB, b)
    ctrl.write(8 * MiB - 512, c)
    assert os.path.getsize(ctrl.free_media_path()) == 0
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '1')
    # nothing is erased by a delete: the blocks are now unallocated capacity
    assert os.path.getsize(ctrl.free_media_path()) == 8 * MiB
    assert where(ctrl, a) | where(ctrl, b) | where(ctrl, c) == \
        {('free.img', 0), ('free.img', 3 * MiB), ('free.img', 8 * MiB - 512)}
    assert create(sim, ctrl, 2 * MiB) == 1
    assert js(sim, 'id-ctrl', ctrl.char_path)['unvmcap'] == str(6 * MiB)
    assert os.path.getsize(ctrl.free_media_path()) == 6 * MiB
    assert ctrl.media_size() == 8 * MiB
    # the new namespace maps the first 2 MiB of what was freed, the rest stays free
    assert where(ctrl, a) == {('ns1.img', 0)}
    assert where(ctrl, b) == {('free.img', MiB)}
    assert where(ctrl, c) == {('free.img', 6 * MiB - 512)}
    node = ctrl.namespace_paths()[0]
    assert read_node(sim, node, 0, tmp_path / 'blk') == a
    with open(node, 'rb') as f:
        assert f.read(512) == a
    assert ctrl.read(0, 512) == a


def test_most_recently_freed_is_first_and_delete_all_keeps_nsid_order(sim):
    ctrl = sim.add_controller(namespaces=[MiB, MiB, MiB], capacity=4 * MiB)
    for nsid in (1, 2, 3):
        ctrl.write(0, mark(f'ns{nsid}'), nsid=nsid)
    ctrl.write_free(0, mark('never-allocated'))
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '2')
    assert where(ctrl, mark('ns2')) == {('free.img', 0)}
    assert where(ctrl, mark('never-allocated')) == {('free.img', MiB)}
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '0xffffffff')
    # 0xffffffff frees 1, 3 (nsid order) in front of what was free already
    assert {m: where(ctrl, mark(m)) for m in ('ns1', 'ns3', 'ns2', 'never-allocated')} == {
        'ns1': {('free.img', 0)}, 'ns3': {('free.img', MiB)},
        'ns2': {('free.img', 2 * MiB)}, 'never-allocated': {('free.img', 3 * MiB)}}
    # one namespace over the whole capacity reads exactly that
    blocks = 4 * MiB // 512
    ok(sim, 'create-ns', ctrl.char_path, '-s', blocks, '-c', blocks, '-f', '0')
    assert [ctrl.read(i * MiB, 512) for i in range(4)] == \
        [mark('ns1'), mark('ns3'), mark('ns2'), mark('never-allocated')]
    assert os.path.getsize(ctrl.free_media_path()) == 0


def test_4k_namespace_takes_nsze_times_4096_bytes(sim):
    ctrl = sim.add_controller(namespaces=[8 * MiB])
    ctrl.write(5 * MiB, mark('late'))
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '1')
    out = ok(sim, 'create-ns', ctrl.char_path, '-s', 1024, '-c', 1024, '-b', '4096')
    assert out.strip() == 'create-ns: Success, created nsid:1'
    ns = ctrl.namespaces()[0]
    assert (ns['nsze'], ns['block_size'], ns['size']) == (1024, 4096, 4 * MiB)
    assert os.path.getsize(ns['backing']) == 4 * MiB
    assert os.path.getsize(ctrl.free_media_path()) == 4 * MiB
    assert where(ctrl, mark('late')) == {('free.img', MiB)}
    nsid = create(sim, ctrl, 4 * MiB, fmt='1')
    assert where(ctrl, mark('late')) == {(f'ns{nsid}.img', MiB)}
    assert ctrl.media_size() == 8 * MiB
    fails(sim, 'create-ns', ctrl.char_path, '-s', 1, '-c', 1, '-f', '1', status=0x4115)


def test_unaligned_sizes_keep_the_media_consistent(sim):
    # 4 KiB + 512 B namespaces: the file system cannot shift these by whole blocks
    ctrl = sim.add_controller(namespaces=[4608, 4608], capacity=3 * 4608)
    ctrl.write(4096, mark('tail1'), nsid=1)
    ctrl.write(0, mark('head2'), nsid=2)
    ctrl.write_free(4096, mark('free'))
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '1')
    assert where(ctrl, mark('tail1')) == {('free.img', 4096)}
    assert where(ctrl, mark('free')) == {('free.img', 4608 + 4096)}
    create(sim, ctrl, 1024)
    assert where(ctrl, mark('tail1')) == {('free.img', 3072)}
    assert ctrl.media_size() == 3 * 4608
    assert where(ctrl, mark('head2')) == {('ns2.img', 0)}


def test_remap_freed_off_new_namespace_reads_zeroes(sim):
    ctrl = sim.add_controller(namespaces=[4 * MiB], remap_freed=False)
    ctrl.write(0, mark('A'))
    ctrl.write(3 * MiB, mark('B'))
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '1')
    create(sim, ctrl, 2 * MiB)
    assert ctrl.read(0, 2 * MiB) == bytes(2 * MiB)
    assert where(ctrl, mark('A')) == set()                 # taken and discarded
    assert where(ctrl, mark('B')) == {('free.img', MiB)}   # still free, still there
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '1')
    ctrl.update(remap_freed=True)
    ctrl.write_free(0, mark('C'))
    create(sim, ctrl, 2 * MiB)
    assert where(ctrl, mark('C')) == {('ns1.img', 0)}


def test_write_free_is_found_and_clears_global_data_erased(sim):
    ctrl = sim.add_controller(namespaces=[2 * MiB], capacity=6 * MiB, sanitize_seconds=0)
    assert os.path.getsize(ctrl.free_media_path()) == 4 * MiB
    assert os.stat(ctrl.free_media_path()).st_blocks == 0          # sparse
    assert sanitize_log(sim, ctrl)['sstat']['global_erased'] == 1
    ctrl.write_free(4 * MiB - 512, mark('end'))
    assert ctrl.find_on_media(mark('end')) == [(ctrl.free_media_path(), 4 * MiB - 512)]
    assert ctrl.read_free(4 * MiB - 512, 512) == mark('end')
    assert sanitize_log(sim, ctrl)['sstat']['global_erased'] == 0
    with pytest.raises(SimError, match='outside the free media'):
        ctrl.write_free(4 * MiB - 511, mark('x'))
    assert ctrl.media_files() == [ctrl.namespaces()[0]['backing'], ctrl.free_media_path()]
    assert ctrl.media_size() == 6 * MiB
    with pytest.raises(SimError, match='non-empty'):
        ctrl.find_on_media(b'')


def test_detached_namespaces_are_media_too(sim):
    ctrl = sim.add_controller(namespaces=[MiB, MiB])
    ctrl.write(0, mark('hidden'), nsid=2)
    ok(sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    assert len(ctrl.namespace_paths()) == 1
    assert where(ctrl, mark('hidden')) == {('ns2.img', 0)}


@pytest.mark.parametrize('sanact', ['2', '4'])
def test_completed_sanitize_leaves_nothing_anywhere(sim, sanact):
    ctrl = sim.add_controller(namespaces=[4 * MiB, 2 * MiB], capacity=12 * MiB,
                              sanitize_seconds=0.2)
    needle = mark('tenant')
    for nsid, size in ((1, 4 * MiB), (2, 2 * MiB)):
        ctrl.write(0, needle, nsid=nsid)
        ctrl.write(size - 512, needle, nsid=nsid)
    ok(sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    ctrl.write_free(0, needle)
    ctrl.write_free(6 * MiB - 512, needle)
    assert len(ctrl.find_on_media(needle)) == 6
    ok(sim, 'sanitize', ctrl.char_path, '-a', sanact)
    assert int(ctrl._state()['total']) == ctrl.media_size() == 12 * MiB
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.find_on_media(needle) == []
    free = ctrl.read_free(0, 6 * MiB)
    assert len(free) == 6 * MiB
    if sanact == '2':
        assert free == bytes(6 * MiB)
    else:
        assert free.count(0) < len(free) // 64                # noise, like the namespaces
    assert sanitize_log(sim, ctrl)['sstat']['global_erased'] == 1


def test_format_write_zeroes_and_host_writes_touch_only_their_namespace(sim, tmp_path):
    ctrl = sim.add_controller(namespaces=[MiB, MiB], capacity=3 * MiB)
    for nsid in (1, 2):
        ctrl.write(0, mark(f'ns{nsid}'), nsid=nsid)
    ctrl.write_free(0, mark('free'))
    ok(sim, 'format', ctrl.char_path, '-n', '1', '--ses=1', '--force')
    assert where(ctrl, mark('ns1')) == set()
    assert where(ctrl, mark('ns2')) == {('ns2.img', 0)}
    assert where(ctrl, mark('free')) == {('free.img', 0)}
    ctrl.write(0, mark('ns1'), nsid=1)
    ok(sim, 'write-zeroes', ctrl.namespace_paths()[1], '-s', '0', '-c', str(MiB // 512 - 1))
    assert where(ctrl, mark('ns2')) == set()
    assert where(ctrl, mark('ns1')) == {('ns1.img', 0)}
    with open(ctrl.namespace_paths()[0], 'r+b') as f:
        f.write(bytes(512))
    assert where(ctrl, mark('ns1')) == set()
    assert where(ctrl, mark('free')) == {('free.img', 0)}


def test_format_to_a_larger_block_returns_the_remainder_to_free_media(sim):
    ctrl = sim.add_controller(namespaces=[MiB + 512])
    ctrl.write(MiB, mark('tail'))
    ok(sim, 'format', ctrl.char_path, '-n', '1', '--ses=0', '-l', '1', '--force')
    ns = ctrl.namespaces()[0]
    assert (ns['block_size'], ns['size']) == (4096, MiB)
    assert os.path.getsize(ns['backing']) == MiB
    assert where(ctrl, mark('tail')) == {('free.img', 0)}
    assert ctrl.media_size() == MiB + 512
    assert js(sim, 'id-ctrl', ctrl.char_path)['unvmcap'] == '512'


def test_delete_and_create_stay_sparse_and_fast(sim):
    ctrl = sim.add_controller(namespaces=[256 * MiB], capacity=512 * MiB)
    ctrl.write(100 * MiB, mark('x'))
    started = time.monotonic()
    ok(sim, 'delete-ns', ctrl.char_path, '-n', '0xffffffff')
    create(sim, ctrl, 64 * MiB)
    create(sim, ctrl, 64 * MiB)
    elapsed = time.monotonic() - started
    assert where(ctrl, mark('x')) == {('ns2.img', 36 * MiB)}
    blocks = sum(os.stat(p).st_blocks for p in ctrl.media_files())
    assert blocks * 512 <= MiB, 'zeroes were written instead of left as holes'
    assert elapsed < 10, elapsed


# ------------------------------------------------------------------ the scanner

def test_find_in_file_chunk_boundaries_overlaps_and_holes(tmp_path):
    path = tmp_path / 'media'
    needle = b'\x00\x00NEEDLE\x00\x00'
    size, core = 3 * MiB, needle[2:-2]
    # next to holes, across a 4 KiB block, across 1 MiB chunks, at both ends
    cores = (0, 4095, MiB - 5, 2 * MiB + 100, size - len(core) - 2)
    with open(path, 'wb') as f:
        f.truncate(size)
        for at in cores:
            f.seek(at)
            f.write(core)
    # the needle's zero padding comes from the holes around; none before 0 or past EOF
    expected = [at - 2 for at in cores if at >= 2 and at + len(core) + 2 <= size]
    assert len(expected) == 4
    for chunk in (7, 4096, 1000, MiB, 16 * MiB):
        assert find_in_file(path, needle, chunk=chunk) == expected, chunk
    assert find_in_file(path, b'aa', chunk=3) == []
    path.write_bytes(bytes(100) + b'NEEDLE\x00')             # one zero short at EOF
    assert find_in_file(path, needle) == []
    path.write_bytes(b'aaaa' + bytes(10) + b'a')
    assert find_in_file(path, b'aa', chunk=2) == [0, 1, 2]
    assert find_in_file(path, bytes(3), chunk=4) == list(range(4, 12))


def test_find_in_file_is_fast_on_dense_files(tmp_path):
    path = tmp_path / 'dense'
    block = os.urandom(MiB)
    with open(path, 'wb') as f:
        for _ in range(128):
            f.write(block)
    needle = block[MiB // 2:MiB // 2 + 64]
    started = time.monotonic()
    hits = find_in_file(path, needle)
    assert hits == [i * MiB + MiB // 2 for i in range(128)]
    assert time.monotonic() - started < 10

"""Host-side zeroing and watermarks on real files (O_DIRECT where the file system
allows it), and namespace naming from sysfs."""
import os
import threading

import pytest

from steward.drivers.nvme import sysfs as nvme_sysfs
from steward.privsep import blockio

MiB = 2 ** 20


def _file(tmp_path, size, fill=b'\xa5'):
    path = tmp_path / 'ns.img'
    with open(path, 'wb') as f:
        f.write(fill * size)
    return str(path)


@pytest.mark.parametrize('size', [3 * MiB, 3 * MiB + 512, 17 * 4096 + 123])
def test_zero_fill_zeroes_every_byte_including_an_unaligned_tail(tmp_path, size):
    path = _file(tmp_path, size)
    seen = []
    written = blockio.zero_fill(path, progress=seen.append, chunk=MiB)
    assert written == size == os.path.getsize(path)
    with open(path, 'rb') as f:
        assert f.read() == bytes(size)
    assert seen[-1] == 1.0 and seen == sorted(seen)


def test_zero_fill_stops_when_cancelled(tmp_path):
    path = _file(tmp_path, 4 * MiB)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(blockio.Cancelled):
        blockio.zero_fill(path, cancel=cancel, chunk=MiB)


def test_mark_offsets_are_spread_aligned_and_include_both_ends():
    size = 64 * MiB
    offs = blockio.mark_offsets(size)
    assert offs[0] == 0 and offs[-1] == size - blockio.MARK_SIZE
    assert len(offs) == blockio.MARKS_PER_NAMESPACE + 1
    assert all(o % blockio.ALIGN == 0 for o in offs)
    assert blockio.mark_offsets(100) == []
    assert blockio.mark_offsets(4096) == [0]


def test_marks_written_then_found_then_gone(tmp_path):
    path = _file(tmp_path, 8 * MiB)
    marks = blockio.write_marks(path)
    assert len({data for _, data in marks}) == len(marks)
    problems = blockio.check_marks(path, marks, expect_zero=False)
    assert len(problems) == len(marks) and 'watermark survived' in problems[0]
    blockio.zero_fill(path)
    assert blockio.check_marks(path, marks, expect_zero=True) == []
    with open(path, 'r+b') as f:               # one block left non-zero, mark gone
        f.seek(marks[3][0])
        f.write(b'\x01')
    assert blockio.check_marks(path, marks, expect_zero=True) == [
        f'{path}@{marks[3][0]}: not zero after zeroing']
    assert blockio.check_marks(path, marks, expect_zero=False) == []


def test_namespaces_from_sysfs_with_multipath_names(tmp_path):
    ctrl_dir = tmp_path / 'sys' / 'nvme1'
    for entry, nsid in (('nvme1c1n1', '1'), ('nvme1n2', '2'), ('ng1n1', None)):
        (ctrl_dir / entry).mkdir(parents=True)
        if nsid:
            (ctrl_dir / entry / 'nsid').write_text(nsid + '\n')
    (ctrl_dir / 'nvme1n2' / 'holders').mkdir()
    (ctrl_dir / 'nvme1n2' / 'holders' / 'dm-0').write_text('')
    ref = nvme_sysfs.ControllerRef(address='0000:01:00.0', name='nvme1',
                                   char_path='/dev/nvme1', sysfs=str(ctrl_dir),
                                   dev_root='/dev')
    nss = ref.namespaces()
    assert [(n.nsid, n.name, n.path) for n in nss] == [
        (1, 'nvme1n1', '/dev/nvme1n1'), (2, 'nvme1n2', '/dev/nvme1n2')]
    assert ref.holders(nss[0]) == [] and ref.holders(nss[1]) == ['dm-0']


def test_controller_for_an_unbound_function_is_none(tmp_path):
    from tests.fixtures import sysfs_tree
    sysfs_tree.make_pci(tmp_path, '0000:0a:00.0', '0x8086', '0x0a54', cls='0x010802',
                        driver='vfio-pci')
    assert nvme_sysfs.controller_for(str(tmp_path), '/dev', '0000:0a:00.0') is None
    assert nvme_sysfs.is_nvme_class('010802') and not nvme_sysfs.is_nvme_class('030000')


def test_zeroout_pieces_are_few_and_cover_everything():
    GiB = 2 ** 30
    for size in (4096, 3 * GiB + 8192, 4 * 10 ** 12 // 4096 * 4096, 16 * 2 ** 40):
        chunks = blockio.zeroout_chunks(size)
        assert chunks[0][0] == 0 and sum(n for _, n in chunks) == size
        assert all(a + n == b for (a, n), (b, _) in zip(chunks, chunks[1:]))
        assert all(off % blockio.ALIGN == 0 for off, _ in chunks)
        assert len(chunks) <= blockio.ZEROOUT_PIECES
    assert [n for _, n in blockio.zeroout_chunks(3 * GiB + 8192)] == [GiB] * 3 + [8192]


def test_kernel_zeroout_reports_a_tool_that_fails(tmp_path):
    target = tmp_path / 'ns'
    target.write_bytes(b'x' * 8192)
    with pytest.raises(OSError, match='exit 1'):
        blockio.kernel_zeroout(str(target), tool='false')
    with pytest.raises(OSError, match='cannot be run'):
        blockio.kernel_zeroout(str(target), tool=str(tmp_path / 'no-such-tool'))
    assert target.read_bytes() == b'x' * 8192

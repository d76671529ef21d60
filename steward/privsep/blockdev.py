"""Block-device I/O of a cleanup in the ``block_io`` daemon (CAP_DAC_OVERRIDE).

Only namespace nodes under ``[DEFAULT] dev_root``; offsets and lengths are checked
against the device's size. Nothing large crosses the channel: watermarks come
back as digests, read-backs as the offsets that failed, zeroing one piece per call
(the caller loops, so cancel and progress stay on its side).
"""
from oslo_config import cfg

from steward import privsep
from steward.privsep import blockio
from steward.privsep import paths

MAX_OFFSETS = 4096          # blocks read back per call


def _node(call, path):
    return paths.nvme_node(call, path, namespace=True)


def _range(call, path, offset, length, align=blockio.ALIGN):
    size = blockio.size_of(path)
    paths.integer(call, 'offset', offset, 0, max(size - 1, 0))
    paths.integer(call, 'length', length, 1, size - offset)
    if offset % align:
        raise paths.refuse(call, f'offset {offset} is not {align}-aligned')


def _offsets(call, path, offsets):
    if not isinstance(offsets, (list, tuple)) or len(offsets) > MAX_OFFSETS:
        raise paths.refuse(call, f'offsets must be a list of at most {MAX_OFFSETS}')
    last = blockio.size_of(path) - blockio.MARK_SIZE
    for off in offsets:
        paths.integer(call, 'offset', off, 0, last)
        if off % blockio.ALIGN:
            raise paths.refuse(call, f'offset {off} is not {blockio.ALIGN}-aligned')
    return list(offsets)


@privsep.block_io.entrypoint
def size(path):
    return blockio.size_of(_node('size', path))


@privsep.block_io.entrypoint
def write_marks(path):
    """[(offset, digest)] of the random watermarks written on ``path``."""
    return blockio.write_marks(_node('write_marks', path))


@privsep.block_io.entrypoint
def check_marks(path, marks, expect_zero):
    path = _node('check_marks', path)
    if not isinstance(marks, (list, tuple)) or not all(
            isinstance(m, (list, tuple)) and len(m) == 2 and isinstance(m[1], str)
            for m in marks):
        raise paths.refuse('check_marks', 'marks must be [(offset, digest)]')
    offsets = _offsets('check_marks', path, [m[0] for m in marks])
    return blockio.check_marks(path, list(zip(offsets, (m[1] for m in marks))),
                               bool(expect_zero))


@privsep.block_io.entrypoint
def nonzero_blocks(path, offsets):
    path = _node('nonzero_blocks', path)
    return blockio.nonzero_blocks(path, _offsets('nonzero_blocks', path, offsets))


@privsep.block_io.entrypoint
def zero_range(path, offset, length):
    """Zeroes written from the host (the shred action); returns the bytes."""
    path = _node('zero_range', path)
    _range('zero_range', path, offset, length)
    return blockio.zero_range(path, offset, length)


@privsep.block_io.entrypoint
def zeroout_range(path, offset, length):
    """The kernel's BLKZEROOUT through ``[nvme] blkdiscard`` (write_zeroes)."""
    path = _node('zeroout_range', path)
    _range('zeroout_range', path, offset, length)
    return blockio.zeroout_range(path, offset, length, tool=cfg.CONF.nvme.blkdiscard)

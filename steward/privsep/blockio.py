"""Host-side block I/O for cleanup: zeroing a whole block device at disk speed and
the read-back watermarks that prove an erase reached the media.

Everything goes through O_DIRECT with page-aligned buffers (anonymous mmap), so
writes reach the device rather than the page cache and read-backs see what the
device returns, not a cached copy of what was there before the erase. Where
O_DIRECT is refused (tmpfs) the file is used buffered and flushed, which on such a
file system is the same storage.
"""
import errno
import hashlib
import logging
import mmap
import os
import random
import subprocess

LOG = logging.getLogger(__name__)

ALIGN = 4096
# One write per 4 MiB: past ~1 MiB the kernel splits a direct write into the
# device's max transfer size anyway; bench/cleanup.py measures it against dd.
ZERO_CHUNK = 4 * 1024 * 1024
# Host-side zeroing goes one slice per call (one privsep call each): a cancel or a
# progress update is at most this far away.
ZERO_SLICE = 64 * 1024 * 1024
MARK_SIZE = ALIGN
MARKS_PER_NAMESPACE = 10


class Cancelled(Exception):
    """The caller's cancel event was set while writing."""


def _open(path, flags):
    """(fd, direct) opening ``path`` with O_DIRECT when the file system allows it."""
    try:
        return os.open(path, flags | os.O_DIRECT | os.O_CLOEXEC), True
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
    return os.open(path, flags | os.O_CLOEXEC), False


def size_of(path):
    """Bytes of a block device or file (what a reader of it can address)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def _pwrite_all(fd, view, offset):
    done = 0
    while done < len(view):
        n = os.pwrite(fd, view[done:], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, f'short write at {offset + done}')
        done += n
    return done


def _pread_exact(fd, view, offset):
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, f'short read at {offset + done}')
        done += n
    return done


def run_pieces(pieces, do, cancel=None, progress=None):
    """``do(offset, length)`` for each piece in order, checking ``cancel`` (an
    Event) before each and reporting ``progress(fraction)`` after each; returns
    the bytes done. The driver passes the privsep entrypoints as ``do``: cancel
    and progress stay on the unprivileged side, one call per piece."""
    total = sum(length for _, length in pieces) or 1
    done = 0
    for offset, length in pieces:
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        done += do(offset, length)
        if progress is not None:
            progress(done / total)
    if progress is not None:
        progress(1.0)
    return done


def slices(size, length=ZERO_SLICE):
    """[(offset, length)] of ``size`` bytes in aligned slices."""
    return [(off, min(length, size - off)) for off in range(0, size, length)]


def zero_range(path, offset, length, chunk=ZERO_CHUNK):
    """Overwrite ``length`` bytes of ``path`` at ``offset`` (aligned) with zeroes,
    then fsync; returns the bytes written.

    One large aligned zero buffer is written over and over with pwrite (no copy,
    no per-block Python work). A tail that is not a multiple of the alignment (the
    end of a device of odd size) is written through a buffered descriptor.
    """
    if offset % ALIGN:
        raise ValueError(f'offset {offset} is not {ALIGN}-aligned')
    end = offset + length
    fd, direct = _open(path, os.O_WRONLY)
    buf = mmap.mmap(-1, chunk)
    # Fault the pages in once, so each direct write pins resident memory.
    buf.write(bytes(chunk))
    view = memoryview(buf)
    pos = offset
    try:
        aligned_end = end - end % ALIGN if direct else end
        while pos < aligned_end:
            n = min(chunk, aligned_end - pos)
            pos += _pwrite_all(fd, view[:n], pos)
        if pos < end:
            tail = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                pos += _pwrite_all(tail, view[:end - pos], pos)
                os.fsync(tail)
            finally:
                os.close(tail)
        os.fsync(fd)
    finally:
        view.release()
        buf.close()
        os.close(fd)
    return pos - offset


def zero_fill(path, cancel=None, progress=None, chunk=ZERO_CHUNK):
    """Overwrite every byte of ``path`` with zeroes; returns the bytes written."""
    return run_pieces(slices(size_of(path)),
                      lambda off, length: zero_range(path, off, length, chunk),
                      cancel, progress)


# BLKZEROOUT is asked for in pieces of at least this much, and at most ~64 pieces
# per device: few processes on a multi-terabyte namespace, and a cancel (timeout,
# agent stop) is seen within one piece.
ZEROOUT_MIN_CHUNK = 1024 ** 3
ZEROOUT_PIECES = 64


def zeroout_chunks(size, align=ALIGN):
    """[(offset, length)] covering ``size`` bytes for BLKZEROOUT."""
    chunk = max(ZEROOUT_MIN_CHUNK, -(-size // ZEROOUT_PIECES))
    chunk = -(-chunk // align) * align
    return [(off, min(chunk, size - off)) for off in range(0, size, chunk)]


def zeroout_range(path, offset, length, tool='blkdiscard', cancel=None):
    """BLKZEROOUT over one range (``blkdiscard --zeroout``); returns ``length``.
    Raises OSError, or Cancelled (the process killed) when ``cancel`` is set."""
    argv = [tool, '--zeroout', '--force', '--offset', str(offset),
            '--length', str(length), path]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    except OSError as err:
        raise OSError(err.errno, f'{tool} cannot be run: {err.strerror}')
    while True:
        try:
            _, stderr = proc.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                proc.kill()
                proc.communicate()
                raise Cancelled()
    if proc.returncode != 0:
        lines = [ln for ln in (stderr or '').splitlines()
                 if ln.strip() and 'Operation forced' not in ln]
        raise OSError(errno.EIO, f'{" ".join(argv)}: exit {proc.returncode}'
                      + (f': {lines[-1].strip()}' if lines else ''))
    return length


def kernel_zeroout(path, tool='blkdiscard', cancel=None, progress=None):
    """Zero every byte of the block device ``path`` with the kernel's BLKZEROOUT
    (util-linux ``blkdiscard --zeroout``): the kernel issues the controller's Write
    Zeroes commands at their largest size, and falls back to writing zero pages
    where the device has none. Returns the bytes zeroed. Raises OSError."""
    return run_pieces(zeroout_chunks(size_of(path)),
                      lambda off, length: zeroout_range(path, off, length, tool, cancel),
                      cancel, progress)


def sample_offsets(size, count, seed=None):
    """``count`` random aligned block offsets of a device of ``size`` bytes."""
    blocks = size // ALIGN
    if blocks == 0:
        return []
    rng = random.Random(seed)
    return sorted({rng.randrange(blocks) * ALIGN for _ in range(count)})


def mark_offsets(size, count=MARKS_PER_NAMESPACE):
    """Spread, aligned offsets: the first block, one per 1/count of the device and
    the last block (boot sectors and backup GPTs live at the ends)."""
    if size < MARK_SIZE:
        return []
    last = (size - MARK_SIZE) // ALIGN * ALIGN
    offsets = {min(i * size // count // ALIGN * ALIGN, last) for i in range(count)}
    offsets.add(last)
    return sorted(offsets)


def digest(data):
    return hashlib.sha256(data).hexdigest()


def write_marks(path, count=MARKS_PER_NAMESPACE):
    """Write random watermarks on ``path``; returns [(offset, sha256 hex digest)]:
    the bytes themselves never leave this function."""
    offsets = mark_offsets(size_of(path), count)
    if not offsets:
        return []
    fd, _ = _open(path, os.O_WRONLY)
    buf = mmap.mmap(-1, MARK_SIZE)
    view = memoryview(buf)
    marks = []
    try:
        for off in offsets:
            buf[:] = os.urandom(MARK_SIZE)
            _pwrite_all(fd, view, off)
            marks.append((off, digest(buf[:])))
        os.fsync(fd)
    finally:
        view.release()
        buf.close()
        os.close(fd)
    return marks


def read_blocks(path, offsets, length=MARK_SIZE):
    """{offset: bytes} read with O_DIRECT (bypassing whatever the page cache holds)."""
    fd, direct = _open(path, os.O_RDONLY)
    buf = mmap.mmap(-1, length)
    view = memoryview(buf)
    out = {}
    try:
        if not direct:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        for off in offsets:
            _pread_exact(fd, view, off)
            out[off] = bytes(buf)
    finally:
        view.release()
        buf.close()
        os.close(fd)
    return out


ZERO_DIGEST = digest(bytes(MARK_SIZE))


def check_marks(path, marks, expect_zero):
    """Problems found reading ``marks`` ([(offset, digest)]) back from ``path``
    (empty list: clean).

    A watermark that reads back unchanged means the erase did not reach that block;
    with ``expect_zero`` (zeroing actions) any non-zero byte there is a problem too.
    """
    problems = []
    if not marks:
        return problems
    found = read_blocks(path, [off for off, _ in marks])
    for off, mark in marks:
        got = digest(found[off])
        if got == mark:
            problems.append(f'{path}@{off}: watermark survived')
        elif expect_zero and got != ZERO_DIGEST:
            problems.append(f'{path}@{off}: not zero after zeroing')
    return problems


def nonzero_blocks(path, offsets):
    """The offsets among ``offsets`` whose block is not all zeroes."""
    return sorted(off for off, data in read_blocks(path, offsets).items()
                  if data.count(0) != len(data))

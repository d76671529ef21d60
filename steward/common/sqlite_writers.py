"""One queue for the writers of a SQLite file, across threads and processes.

SQLite admits one writer at a time; the others poll with growing sleeps (its
busy_timeout handler naps up to 100 ms), which turned bursts of concurrent writes
into long tails and left a busy Placement asleep for most of a first
registration. Writers therefore queue here before ``BEGIN IMMEDIATE``: the threads
of a process on a lock, the processes on ``flock`` of ``<database>-writers``
beside the file. The kernel wakes the next waiter the moment the lock is released.
SQLite's own locking stays what correctness rests on; the queue only orders it.
"""
import fcntl
import os
import threading


def sqlite_file(url):
    """The file of a file-backed SQLite URL (a string or a SQLAlchemy URL), ''
    for an in-memory database, None for any other database."""
    import sqlalchemy
    u = sqlalchemy.engine.make_url(url)
    if not u.drivername.startswith('sqlite'):
        return None
    if not u.database or u.database == ':memory:' or u.query.get('mode') == 'memory':
        return ''
    return u.database


class WriterQueue:
    """Reentrant per thread: a writer nested in another of the same thread passes.
    ``path`` None (an in-memory database): threads only."""

    def __init__(self, path=None):
        self._lock_path = f'{path}-writers' if path else None
        self._lock = threading.RLock()
        self._depth = threading.local()
        self._fd = None
        self._fd_pid = None

    def _fd_of_this_process(self):
        # A flock belongs to an open file, which fork() shares: each process opens
        # its own, or a forked worker would take its parent's lock for its own.
        if self._fd_pid != os.getpid():
            self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                               0o600)
            self._fd_pid = os.getpid()
        return self._fd

    def acquire(self):
        self._lock.acquire()
        depth = getattr(self._depth, 'n', 0)
        if depth == 0 and self._lock_path:
            try:
                fcntl.flock(self._fd_of_this_process(), fcntl.LOCK_EX)
            except BaseException:
                self._lock.release()
                raise
        self._depth.n = depth + 1

    def release(self):
        self._depth.n -= 1
        if self._depth.n == 0 and self._lock_path:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

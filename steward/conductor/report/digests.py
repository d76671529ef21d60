"""Hosts' stored report digests (steward/db/host_reports.py), looked up together.

A fleet's quiet reports arrive at one conductor from many RPC threads at once;
each asks for its host's digest, and one thread reads those of every host that
asked meanwhile in one SELECT (under load, tens per statement). A report never
waits for more to gather: the batch is whatever queued while the last SELECT
ran, so a lone report costs one statement and no delay.
"""
import logging
import queue
import threading

from oslo_db import exception as db_exc

from steward.db import host_reports

LOG = logging.getLogger(__name__)

MAX_BATCH = 500


class _Ask:
    __slots__ = ('host', 'digest', 'error', 'done')

    def __init__(self, host):
        self.host = host
        self.digest = self.error = None
        self.done = threading.Event()


class StoredDigests:
    def __init__(self, database):
        self.database = database
        self._queue = queue.SimpleQueue()
        self._worker = None
        self._lock = threading.Lock()

    def get(self, host):
        """The digest stored for ``host``, or None."""
        ask = _Ask(host)
        self._start()
        self._queue.put(ask)
        ask.done.wait()
        if ask.error is not None:
            raise ask.error
        return ask.digest

    def _start(self):
        if self._worker is not None:
            return
        with self._lock:
            if self._worker is None:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name='steward-report-digests')
                worker.start()
                self._worker = worker

    def _work(self):
        while True:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                with self.database.single_read() as conn:
                    found = host_reports.digests(conn, {a.host for a in batch})
                for ask in batch:
                    ask.digest = found.get(ask.host)
            except Exception as err:  # noqa: BLE001 - each caller raises it
                for ask in batch:
                    ask.error = err
            finally:
                for ask in batch:
                    ask.done.set()


def store(database, digests_by_host):
    """Record the hosts' digests; a host's row inserted meanwhile by another
    conductor (the same report taken twice) leaves it to the next report."""
    try:
        with database.writer() as s:
            host_reports.store(s, digests_by_host)
    except db_exc.DBDuplicateEntry:
        LOG.info('Report digests of %s: written meanwhile by another conductor; '
                 'the next report writes them', ', '.join(sorted(digests_by_host)))

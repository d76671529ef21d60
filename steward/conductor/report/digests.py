"""Hosts' stored report digests (steward/db/host_reports.py), as a conductor
reads them.

``get`` reads the database: a fleet's reports arrive at one conductor from many
RPC threads at once; each asks for its host's digest, and one thread reads those
of every host that asked meanwhile in one SELECT. A report never waits for more
to gather: the batch is whatever queued while the last SELECT ran, so a lone
report costs one statement and no delay.

``cached`` answers from memory: every conductor reads the whole table every
``REFRESH`` seconds (one SELECT of two short columns per host: about 10 ms of
conductor CPU at 10 000 hosts) and keeps what it writes itself. A quiet report
whose digest (RPC 1.3 ``report_unchanged``) is the one cached costs no
statement; a digest not cached is looked up with ``get``. What another conductor
changes (a digest forgotten for a repair, steward/conductor/selfheal.py; a
restored database) reaches this one's memory within ``REFRESH`` seconds: a
digest alone is taken as quiet at most that long after it no longer holds.
"""
import logging
import queue
import threading
import time

from oslo_db import exception as db_exc

from steward.db import host_reports

LOG = logging.getLogger(__name__)

MAX_BATCH = 500
REFRESH = 10.0


class _Ask:
    __slots__ = ('host', 'digest', 'error', 'done')

    def __init__(self, host):
        self.host = host
        self.digest = self.error = None
        self.done = threading.Event()


class StoredDigests:
    def __init__(self, database, refresh=REFRESH):
        self.database = database
        self.refresh = refresh
        self._queue = queue.SimpleQueue()
        self._worker = None
        self._lock = threading.Lock()
        self._memory = {}
        self._refreshed = None          # monotonic time of the last whole read
        self._refreshing = False

    def cached(self, host):
        """(digest, health reading time) this conductor holds for ``host`` (None:
        not known here), the whole table read again when the last read is
        ``refresh`` seconds old."""
        now = time.monotonic()
        if self._refreshed is None or now - self._refreshed >= self.refresh:
            self._reload(now)
        return self._memory.get(host)

    def remember(self, entries):
        """{host: (digest, health reading time)} this conductor stored or found
        stored; None (or a digest None) forgets the host."""
        with self._lock:
            for host, entry in entries.items():
                if entry is None or entry[0] is None:
                    self._memory.pop(host, None)
                else:
                    self._memory[host] = entry

    def forget(self, host=None):
        """``host``'s digest (every host's with None) is no longer known here."""
        with self._lock:
            if host is None:
                self._memory = {}
            else:
                self._memory.pop(host, None)

    def _reload(self, now):
        with self._lock:
            if self._refreshing:
                return          # another thread reads; this report uses what is here
            self._refreshing = True
        try:
            with self.database.single_read() as conn:
                memory = host_reports.all_digests(conn)
            with self._lock:
                self._memory = memory
                self._refreshed = now
        except Exception:  # noqa: BLE001 - the report looks its host up instead
            LOG.exception('Reading the hosts\' report digests failed')
            with self._lock:
                self._refreshed = now
                self._memory = {}
        finally:
            with self._lock:
                self._refreshing = False

    def get(self, host):
        """(digest, health reading time) stored for ``host``, or None; remembered."""
        ask = _Ask(host)
        self._start()
        self._queue.put(ask)
        ask.done.wait()
        if ask.error is not None:
            raise ask.error
        if ask.digest is not None:
            self.remember({host: ask.digest})
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


def store(database, entries):
    """Record {host: (digest, health reading time)}; a host's row inserted
    meanwhile by another conductor (the same report taken twice) leaves it to the
    next report (False)."""
    try:
        with database.writer() as s:
            host_reports.store(s, entries)
        return True
    except db_exc.DBDuplicateEntry:
        LOG.info('Report digests of %s: written meanwhile by another conductor; '
                 'the next report writes them', ', '.join(sorted(entries)))
        return False

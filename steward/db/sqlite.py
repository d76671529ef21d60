"""SQLite as Steward's own database and the embedded Placement's use it: one setup.

* Every connection: pysqlite's own BEGIN switched off (the caller chooses deferred
  or ``BEGIN IMMEDIATE``), ``busy_timeout``, and on a file WAL with
  ``synchronous=NORMAL`` (readers beside a writer; a commit syncs at checkpoints).
* Writers of one process queue on a lock before ``BEGIN IMMEDIATE``: SQLite's
  busy handler makes a waiting writer sleep and poll with growing naps (up to
  100 ms), which turned a burst of concurrent binds into long tails. The lock is
  bounded by the same busy timeout, so a write waits at most that long for its
  turn in the process and then at most that long for SQLite's lock, and fails
  as SQLite fails ("database is locked": the API answers 503). Between processes
  (a `steward api` beside `steward serve`, the embedded Placement's workers)
  SQLite's own busy handler orders the writers.
"""
import sqlite3
import threading

import sqlalchemy
from sqlalchemy import event


def sqlite_file(url):
    """The file of a file-backed SQLite URL (a string or a SQLAlchemy URL), ''
    for an in-memory database, None for any other database."""
    u = sqlalchemy.engine.make_url(url)
    if not u.drivername.startswith('sqlite'):
        return None
    if not u.database or u.database == ':memory:' or u.query.get('mode') == 'memory':
        return ''
    return u.database


def configure(engine, busy_timeout_ms, foreign_keys=True):
    """The connection settings above on every new connection of ``engine``."""
    file_backed = bool(sqlite_file(engine.url))

    @event.listens_for(engine, 'connect')
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if foreign_keys:
            cur.execute('PRAGMA foreign_keys=ON')
        cur.execute(f'PRAGMA busy_timeout={int(busy_timeout_ms)}')
        if file_backed:
            cur.execute('PRAGMA journal_mode=WAL')
            cur.execute('PRAGMA synchronous=NORMAL')
        cur.close()


class WriterLock:
    """The writers of one process, one at a time; reentrant per thread (a writer
    nested in another of the same thread passes). ``acquire`` waits at most
    ``timeout`` seconds, then raises what SQLite raises when its busy timeout
    runs out."""

    def __init__(self, timeout):
        self.timeout = timeout
        self._lock = threading.RLock()

    def acquire(self):
        if not self._lock.acquire(timeout=self.timeout):
            raise sqlalchemy.exc.OperationalError(
                'BEGIN IMMEDIATE', None, sqlite3.OperationalError(
                    f'database is locked (another writer of this process held it '
                    f'for over {self.timeout:g} s)'))

    def release(self):
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

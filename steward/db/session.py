"""Engine and transactions.

``reader()`` and ``writer()`` are the only ways code touches the database. On
SQLite a writer starts with ``BEGIN IMMEDIATE``: with the driver's deferred BEGIN,
two threads that both read then write deadlock on the lock upgrade and one gets
"database is locked" at once (the trap placement.md measured). Readers keep a
deferred BEGIN, and WAL mode lets them run beside a writer.
"""
import contextlib
import threading

import sqlalchemy as sa
from sqlalchemy import event, orm

from steward.conf import CONF
from steward.db import sqlite

_lock = threading.Lock()
_engine = None
_url = None
_factory = None
_writer_factory = None
# SQLite: where this process's writers queue (steward/db/sqlite.py). None on
# other databases.
_writers = None


def _sqlite_setup(engine):
    busy = CONF.database.sqlite_busy_timeout
    sqlite.configure(engine, busy)

    @event.listens_for(engine, 'begin')
    def _begin(conn):
        mode = 'IMMEDIATE' if conn.get_execution_options().get('steward_writer') else ''
        conn.exec_driver_sql(f'BEGIN {mode}'.strip())


def get_engine():
    global _engine, _url, _factory, _writer_factory, _writers
    url = CONF.database.connection
    with _lock:
        if _engine is None or url != _url:
            if _engine is not None:
                _engine.dispose()
            kwargs = {}
            if url.startswith('sqlite'):
                kwargs['connect_args'] = {'check_same_thread': False}
            else:
                kwargs.update(pool_size=CONF.database.max_pool_size, pool_pre_ping=True)
            engine = sa.create_engine(url, **kwargs)
            _writers = None
            if engine.dialect.name == 'sqlite':
                _sqlite_setup(engine)
                _writers = sqlite.WriterLock(CONF.database.sqlite_busy_timeout / 1000)
            _engine, _url = engine, url
            _factory = orm.sessionmaker(bind=engine, expire_on_commit=False)
            _writer_factory = orm.sessionmaker(
                bind=engine.execution_options(steward_writer=True),
                expire_on_commit=False)
    return _engine


def dispose():
    global _engine, _url
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = _url = None


def after_fork():
    """In a forked worker: drop the pooled connections of the parent without
    closing them (they are the parent's)."""
    with _lock:
        if _engine is not None:
            _engine.dispose(close=False)


@contextlib.contextmanager
def reader():
    get_engine()
    with _factory() as session:
        with session.begin():
            yield session


@contextlib.contextmanager
def writer():
    # SQLite admits one writer at a time and makes the others poll with growing
    # sleeps, which turned a burst of 16 concurrent binds into 250 ms tails:
    # writers queue first, at most busy_timeout (steward/db/sqlite.py).
    get_engine()
    queue = _writers or contextlib.nullcontext()
    with queue, _writer_factory() as session:
        with session.begin():
            yield session

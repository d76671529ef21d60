"""steward/db/sqlite.py: the one SQLite setup of Steward's database and the
embedded Placement's; a writer waits a bounded time."""
import threading
import time

import pytest
import sqlalchemy

from steward.db import sqlite


def test_writer_lock_is_bounded_and_fails_as_sqlite_fails():
    lock = sqlite.WriterLock(0.2)
    held, done = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            done.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        start = time.monotonic()
        with pytest.raises(sqlalchemy.exc.OperationalError, match='database is locked'):
            lock.acquire()
        assert 0.2 <= time.monotonic() - start < 5
    finally:
        done.set()
        t.join()
    with lock:
        with lock:              # reentrant in one thread
            pass


def test_connection_settings(tmp_path):
    engine = sqlalchemy.create_engine(f'sqlite:///{tmp_path}/x.sqlite')
    sqlite.configure(engine, 1234)
    with engine.connect() as conn:
        assert conn.exec_driver_sql('PRAGMA busy_timeout').scalar() == 1234
        assert conn.exec_driver_sql('PRAGMA journal_mode').scalar() == 'wal'
        assert conn.exec_driver_sql('PRAGMA foreign_keys').scalar() == 1
    memory = sqlalchemy.create_engine('sqlite://')
    sqlite.configure(memory, 10, foreign_keys=False)
    with memory.connect() as conn:
        assert conn.exec_driver_sql('PRAGMA journal_mode').scalar() == 'memory'
        assert conn.exec_driver_sql('PRAGMA foreign_keys').scalar() == 0


@pytest.mark.parametrize('url, found', [
    ('sqlite:////var/lib/x.sqlite', '/var/lib/x.sqlite'), ('sqlite://', ''),
    ('sqlite:///:memory:', ''), ('postgresql://u:p@h/db', None)])
def test_sqlite_file(url, found):
    assert sqlite.sqlite_file(url) == found

"""A connection returned to the pool on MariaDB (steward/db/session.py,
``_reset_open_transactions_only``): rolled back only while a transaction is open
on it. Both drivers (mysqlclient, PyMySQL) send a ROLLBACK whatever the
connection's state, and SQLAlchemy's pool asks for one after every commit."""
import time

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.parametrize('db', ['mysql', 'mysql+pymysql'], indirect=True)


@pytest.fixture
def rollbacks(database, monkeypatch):
    """[connections] the driver sent a ROLLBACK on (the real one is sent), from a
    pooled connection on (SQLAlchemy rolls a new one back once, after reading
    the server's settings). The driver's connection class is Python's in both
    (mysqlclient's over its C one), so its rollback can be wrapped."""
    with database.writer() as s:
        s.execute(sa.text('SELECT 1'))
        cls = type(s.connection().connection.dbapi_connection)
    seen = []
    real = cls.rollback

    def rollback(self):
        seen.append(self)
        return real(self)

    monkeypatch.setattr(cls, 'rollback', rollback)
    return seen


def _open_transactions(database, dbapi_connection):
    """InnoDB's open transactions on ``dbapi_connection``, as another connection
    sees them: InnoDB renews the view it shows of them when it is read more than
    0.1 s after the last time."""
    def count():
        with database.engine.connect() as conn:
            return conn.execute(sa.text(
                'SELECT COUNT(*) FROM information_schema.innodb_trx '
                'WHERE trx_mysql_thread_id = :thread'),
                {'thread': dbapi_connection.thread_id()}).scalar()
    time.sleep(0.2)
    return count()


def test_a_committed_transaction_is_not_rolled_back_again(database, rollbacks):
    for _ in range(3):
        with database.writer() as s:
            s.execute(sa.text('SELECT COUNT(*) FROM devices')).scalar()
        with database.reader() as s:
            s.execute(sa.text('SELECT COUNT(*) FROM devices')).scalar()
    assert rollbacks == []


def test_a_connection_returned_in_a_transaction_is_rolled_back(database, rollbacks):
    raw = database.engine.raw_connection()
    dbapi = raw.dbapi_connection
    cursor = raw.cursor()
    cursor.execute('SELECT COUNT(*) FROM devices FOR UPDATE')
    cursor.close()
    assert _open_transactions(database, dbapi) == 1
    rollbacks.clear()           # the probe's own (a Core connection's close)
    raw.close()                 # back to the pool, its transaction open
    assert rollbacks == [dbapi]
    assert _open_transactions(database, dbapi) == 0


def test_a_failed_transaction_leaves_nothing_open(database, rollbacks):
    with pytest.raises(sa.exc.DBAPIError):
        with database.writer() as s:
            s.execute(sa.text('SELECT COUNT(*) FROM devices FOR UPDATE')).scalar()
            s.execute(sa.text('SELECT * FROM no_such_table'))
    # The session's rollback, not the pool's again.
    assert len(rollbacks) == 1
    assert _open_transactions(database, rollbacks[0]) == 0

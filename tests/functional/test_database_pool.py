"""Pooled connections on PostgreSQL and MariaDB (steward/db/session.py,
``_check_at_checkout``): one in use is handed out without a round trip, one the
server closed while it sat in the pool is replaced before a transaction meets it,
and one idle longer than IDLE_PING_SECONDS is pinged first."""
import pytest
import sqlalchemy as sa

from steward.db import session as db_session
from tests.fixtures.stack import wait_for

pytestmark = pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)


@pytest.fixture
def pings(database, monkeypatch):
    """[connections pinged] by the engine's dialect (the real ping runs)."""
    seen = []
    real = database.engine.dialect.do_ping

    def do_ping(dbapi_connection):
        seen.append(dbapi_connection)
        return real(dbapi_connection)

    monkeypatch.setattr(database.engine.dialect, 'do_ping', do_ping)
    return seen


def _backend(database):
    """The server's id of the connection a reader transaction runs on."""
    query = 'SELECT pg_backend_pid()' if database.engine.dialect.name == 'postgresql' \
        else 'SELECT CONNECTION_ID()'
    with database.reader() as s:
        return s.execute(sa.text(query)).scalar()


def _end_on_server(url, backend):
    """End connection ``backend`` from another connection, as a restart does, and
    return once the server no longer lists it."""
    # Each statement its own transaction: PostgreSQL's pg_stat_activity is a
    # snapshot taken at a transaction's first read of it.
    other = sa.create_engine(url, poolclass=sa.pool.NullPool,
                             isolation_level='AUTOCOMMIT')
    try:
        with other.connect() as conn:
            if other.dialect.name == 'postgresql':
                conn.execute(sa.text('SELECT pg_terminate_backend(:pid)'), {'pid': backend})
                listed = 'SELECT count(*) FROM pg_stat_activity WHERE pid = :pid'
            else:
                conn.execute(sa.text(f'KILL {int(backend)}'))
                listed = ('SELECT count(*) FROM information_schema.processlist '
                          'WHERE id = :pid')
            wait_for(lambda: not conn.execute(sa.text(listed), {'pid': backend}).scalar(),
                     f'connection {backend} gone from the server')
    finally:
        other.dispose()


def test_a_connection_in_use_is_handed_out_without_a_ping(database, pings, monkeypatch):
    monkeypatch.setattr(db_session, 'IDLE_PING_SECONDS', 3600)
    backends = {_backend(database) for _ in range(5)}
    with database.writer() as s:
        s.execute(sa.text('SELECT 1'))
    assert len(backends) == 1 and pings == []


def test_a_connection_the_server_ended_in_the_pool_is_replaced(db, database, pings,
                                                               monkeypatch):
    """Ended while pooled, used again at once: no ping would have been sent for
    its idle time, its socket says it is gone, and the transaction runs on a new
    connection instead of failing."""
    monkeypatch.setattr(db_session, 'IDLE_PING_SECONDS', 3600)
    first = _backend(database)
    _end_on_server(db, first)
    second = _backend(database)
    assert second != first
    assert len(pings) == 1      # the ended one, found broken by its ping
    assert _backend(database) == second and len(pings) == 1


def test_an_idle_connection_is_pinged_before_it_is_handed_out(database, pings,
                                                              monkeypatch):
    monkeypatch.setattr(db_session, 'IDLE_PING_SECONDS', 0)
    first = _backend(database)
    assert pings == []          # a new connection is not pinged
    assert _backend(database) == first and len(pings) == 1

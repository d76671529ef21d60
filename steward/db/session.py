"""The database of one process: its engine and its transactions.

``Database.reader()`` and ``Database.writer()`` are the only ways code touches
the database. The command's composition root (steward/cmd/) builds one Database
and hands it to what needs it; nothing here is module-level state.

On SQLite a writer starts with ``BEGIN IMMEDIATE``: with the driver's deferred
BEGIN, two threads that both read then write deadlock on the lock upgrade and one
gets "database is locked" at once (the trap placement.md measured). Readers keep a
deferred BEGIN, and WAL mode lets them run beside a writer.

PostgreSQL and MariaDB/MySQL engines are oslo.db's (``[database]`` pool, recycle,
``mysql_sql_mode``); a service that needs its database at start waits for it
(``wait_reachable``: ``max_retries`` and ``retry_interval``). Every engine, SQLite's too,
carries oslo.db's exception filters: a driver's error leaves as ``DBDeadlock``,
``DBDuplicateEntry``, ``DBConnectionError``... whatever the database.
"""
import contextlib
import logging
import select
import time

from oslo_db.sqlalchemy import engines
from oslo_db.sqlalchemy import exc_filters
import sqlalchemy as sa
from sqlalchemy import event, orm
from sqlalchemy.pool import base as pool_base

from steward.common import exception
from steward.conf import CONF
from steward.db import retry
from steward.db import sqlite
from steward.db import transitions

LOG = logging.getLogger(__name__)


def _sqlite_setup(engine, busy_ms):
    sqlite.configure(engine, busy_ms)

    @event.listens_for(engine, 'begin')
    def _begin(conn):
        options = conn.get_execution_options()
        if options.get('steward_single_read'):
            return
        mode = 'IMMEDIATE' if options.get('steward_writer') else ''
        conn.exec_driver_sql(f'BEGIN {mode}'.strip())


def _engine(url, autocommit=False):
    """The engine of ``url``; ``autocommit`` (MySQL): its connections commit
    each statement, and closing one sends no ROLLBACK."""
    if sqlite.sqlite_file(url) is None:
        conf = CONF.database
        try:
            engine = _create_engine(url, conf)
        except ImportError as err:
            raise exception.InvalidConfiguration(reason=missing_driver(url, err))
        _check_at_checkout(engine)
        if autocommit:
            _autocommit(engine)
        elif engine.dialect.name == 'mysql':
            _read_committed(engine)
            _reset_open_transactions_only(engine)
        return engine
    # Not oslo.db's SQLite engine: it swaps the pool for a NullPool (a new
    # connection, and its PRAGMAs, per transaction) and emits a deferred BEGIN of
    # its own, where Steward's writers need BEGIN IMMEDIATE. Its filters only, on
    # errors; not register_engine's commit, rollback and checkin listeners, which
    # keep a savepoint's rollback cause (Steward takes no savepoints) at a cost
    # on every transaction of the hot path.
    engine = sa.create_engine(url, connect_args={'check_same_thread': False})
    event.listen(engine, 'handle_error', exc_filters.handler, retval=True)
    return engine


#: The extra that installs each database driver (pyproject.toml).
DRIVER_EXTRAS = {'MySQLdb': 'mysql', 'pymysql': 'mysql', 'psycopg': 'postgres',
                 'psycopg2': 'postgres'}


def missing_driver(url, err):
    """What to install when ``[database] connection`` names a driver that is not
    installed (an API host set up without the mysql extra): one line."""
    module = (getattr(err, 'name', None) or str(err)).split('.')[0]
    scheme = str(url).split('://', 1)[0]
    extra = DRIVER_EXTRAS.get(module)
    how = (f'install Steward with the {extra} extra (pip install "steward[{extra}]", '
           f'or tools/bootstrap.sh {extra})' if extra
           else f'install the Python package that provides {module}')
    return (f'[database] connection uses {scheme}, whose driver {module} is not '
            f'installed: {how}')


def _create_engine(url, conf):
    return engines.create_engine(
        url, mysql_sql_mode=conf.mysql_sql_mode,
        mysql_wsrep_sync_wait=conf.mysql_wsrep_sync_wait,
        connection_recycle_time=conf.connection_recycle_time,
        connection_debug=conf.connection_debug,
        max_pool_size=conf.max_pool_size, max_overflow=conf.max_overflow,
        pool_timeout=conf.pool_timeout, connection_trace=conf.connection_trace,
        # No connection at construction: an API (or a hosted app's worker)
        # starts while its database is down and answers 503 until it is
        # back; the services that need it at start wait in
        # Database.wait_reachable() on max_retries/retry_interval.
        max_retries=0,
        # oslo.db's time.sleep(0) at every checkin is for eventlet's green
        # threads; Steward's are OS threads, for which it is a GIL handover
        # per transaction on the hot path and nothing else.
        thread_checkin=False,
        connection_parameters=conf.connection_parameters)


#: The releases whose private attributes this module sets or reads, where no
#: public interface does the same: SQLAlchemy's pool ``_pre_ping`` (oslo.db
#: turns pre-ping on with no option, _check_at_checkout) and ``_reset_on_return``
#: (oslo.db passes no ``pool_reset_on_return``, _reset_open_transactions_only),
#: and PyMySQL's ``_sock`` (it has no ``fileno()``, _socket_fd). pyproject.toml
#: keeps both below their next minor release, upper-constraints.txt pins the
#: tested one, and tests/unit/test_db_private_use.py fails on any other: a new
#: release is checked before it is allowed (issue 54, item 4).
PRIVATE_USE_TESTED = {'SQLAlchemy': ('2.0', '2.1'), 'PyMySQL': ('1.1', '1.2')}


#: A pooled connection unused for longer than this is pinged (a round trip)
#: before it is handed out; one used more recently is only looked at.
IDLE_PING_SECONDS = 1.0
_CHECKED_IN = 'steward_checked_in'


def _check_at_checkout(engine):
    """oslo.db pings every pooled connection when it is handed out
    (pool_pre_ping), to find the ones a database restart or a failover broke
    before a transaction does: a round trip, and a thread's sleep and wake-up,
    per transaction, five of an instance's thirty on the hot path.

    A server that ends a connection (restarted, stopped, its node killed behind
    HAProxy, wait_timeout) closes its socket, and says so first on PostgreSQL and
    MariaDB; an idle connection has nothing to read otherwise. So a connection
    used less than IDLE_PING_SECONDS ago is handed out when its socket has
    nothing to read, a poll() with no wait; one with anything to read, or one
    idle longer (a connection a firewall dropped silently gets no notice: the
    ping's error is then what finds it), or one whose driver does not give its
    socket, is pinged as oslo.db does. A connection found broken is replaced by
    the pool before the transaction starts (DisconnectionError), as after a
    failed pre-ping."""
    engine.pool._pre_ping = False       # oslo.db sets it, with no option

    @event.listens_for(engine, 'checkin')
    def _checkin(dbapi_connection, record):
        record.info[_CHECKED_IN] = time.monotonic()

    @event.listens_for(engine, 'checkout')
    def _checkout(dbapi_connection, record, proxy):
        last = record.info.pop(_CHECKED_IN, None)
        if last is None:
            return          # connected for this checkout
        fd = _socket_fd(dbapi_connection)
        if fd is not None and time.monotonic() - last < IDLE_PING_SECONDS \
                and not _readable(fd):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as err:
            raise sa.exc.DisconnectionError(str(err)) from err


def _socket_fd(dbapi_connection):
    """The connection's socket (psycopg, psycopg2: fileno(); PyMySQL: _sock), or
    None."""
    try:
        fileno = getattr(dbapi_connection, 'fileno', None)
        if fileno is None:
            fileno = dbapi_connection._sock.fileno
        return fileno()
    except Exception:  # noqa: BLE001 - closed, or a driver without either
        return None


def _readable(fd):
    """Anything to read (data, the end of the stream, an error) on ``fd`` now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _read_committed(engine):
    """MariaDB/MySQL transactions at READ COMMITTED, PostgreSQL's level, which
    Steward's transactions are written for (each statement reads what is
    committed when it starts; the bind guard is row locks and compare-and-swap).
    At InnoDB's default, REPEATABLE READ, a locking read keeps every row it
    scanned locked, the ones its WHERE rejected included, and updates lock the
    gaps of the indexes around them: a bind looking for a free handle held the
    handles in use, the delete freeing one of them waited for it, and the bind
    then waited for the gap the delete's ARQ update locked. Four clients on one
    device met that deadlock every few seconds, each a retry a second later."""
    @event.listens_for(engine, 'connect')
    def _connect(dbapi_connection, record):
        cursor = dbapi_connection.cursor()
        cursor.execute('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED')
        cursor.close()


def _reset_open_transactions_only(engine):
    """The pool rolls a returned connection back only when a transaction may be
    open on it. SQLAlchemy's pool rolls back every connection returned after a
    commit, and PyMySQL, unlike psycopg, sends that ROLLBACK whatever the
    connection's state: a round trip after each of a boot's three write
    transactions, for nothing. A connection is taken for clean once SQLAlchemy
    committed or rolled back what it began on it, and for dirty from its
    checkout (a raw DBAPI use goes through no event) and from every begin: one
    returned dirty (a failure, a read left open) is rolled back before anyone
    else gets it, and discarded if that fails, as before. (PyMySQL's copy of the
    server's status flags is no guide: a SELECT's answer does not update it.)"""
    engine.pool._reset_on_return = pool_base.reset_none

    @event.listens_for(engine, 'checkout')
    def _checked_out(dbapi_connection, record, proxy):
        record.info[_CLEAN] = False

    # A Connection invalidated by a lost server has no pooled connection left to
    # mark (and asking it for one raises): the pool discards that one anyway.
    @event.listens_for(engine, 'begin')
    def _begun(conn):
        if not conn.invalidated:
            conn.connection.info[_CLEAN] = False

    @event.listens_for(engine, 'commit')
    @event.listens_for(engine, 'rollback')
    def _ended(conn):
        if not conn.invalidated:
            conn.connection.info[_CLEAN] = True

    @event.listens_for(engine, 'reset')
    def _reset(dbapi_connection, record, state):
        if state.terminate_only or state.transaction_was_reset:
            return
        if record is None or not record.info.get(_CLEAN):
            dbapi_connection.rollback()


_CLEAN = 'steward_transaction_ended'


def _autocommit(engine):
    """Every connection of ``engine`` in autocommit from its start (one SET, once),
    and the ROLLBACK SQLAlchemy ends each use with left unsent (PyMySQL would send
    it, for nothing): the driver says the connection is in autocommit, so
    nothing can be left open on it. A connection a caller took out of autocommit
    is rolled back as usual."""
    engine.dialect.skip_autocommit_rollback = True

    @event.listens_for(engine, 'connect')
    def _connect(dbapi_connection, record):
        dbapi_connection.autocommit(True)


class Database:
    """One engine (``url``, by default ``[database] connection``) and its
    reader/writer sessions."""

    def __init__(self, url=None):
        url = CONF.database.connection if url is None else url
        self.url = url
        self.engine = _engine(url)
        # SQLite: where this process's writers queue (steward/db/sqlite.py); a
        # null context on other databases.
        self._writers = contextlib.nullcontext()
        if self.engine.dialect.name == 'sqlite':
            busy = CONF.database.sqlite_busy_timeout
            _sqlite_setup(self.engine, busy)
            self._writers = sqlite.WriterLock(busy / 1000)
        self._reader_factory = orm.sessionmaker(bind=self.engine, expire_on_commit=False)
        dialect = self.engine.dialect.name
        # One statement alone needs no transaction: it is its own snapshot, and
        # a write of new rows commits with it. psycopg runs it in autocommit (a
        # flag on the client), without the BEGIN and the COMMIT or ROLLBACK a
        # transaction costs, two round trips. On MySQL switching a connection's
        # autocommit is itself a statement, each way: those statements take
        # connections of a second pool that stay in autocommit.
        self._autocommit_pool = _engine(url, autocommit=True) if dialect == 'mysql' else None
        self._autocommit = self._autocommit_pool or (
            self.engine.execution_options(isolation_level='AUTOCOMMIT')
            if dialect == 'postgresql' else None)
        self._single_read = (self._autocommit or self.engine).execution_options(
            steward_single_read=True)
        # Without autocommit (SQLite) a single write is a transaction of one
        # statement, queued as a writer's is.
        self._single_write = self.engine.execution_options(steward_writer=True)
        self._writer_factory = orm.sessionmaker(bind=self._single_write,
                                                expire_on_commit=False)
        # advance()'s history and commit log, on this database's sessions only.
        for factory in (self._reader_factory, self._writer_factory):
            transitions.register(factory)

    @contextlib.contextmanager
    def reader(self):
        with self._reader_factory() as session:
            with session.begin():
                yield session

    @contextlib.contextmanager
    def single_read(self):
        """A Core connection for one read statement: no ORM session and, on
        SQLite, no BEGIN (one statement is its own snapshot). Nova's reads before
        and after every boot (a profile by name, an instance's ARQs) spent a third
        of their time opening and closing a session's transaction."""
        with self._single_read.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def single_write(self):
        """A Core connection for one write statement that needs no transaction
        around it (new rows inserted at once): on PostgreSQL and MySQL the
        statement alone, without the BEGIN and the COMMIT around it."""
        if self._autocommit is not None:
            with retry.opened(), self._autocommit.connect() as conn:
                yield conn
            return
        with retry.opened(), self._writers, self._single_write.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def writer(self):
        # SQLite admits one writer at a time and makes the others poll with growing
        # sleeps, which turned a burst of 16 concurrent binds into 250 ms tails:
        # writers queue first, at most busy_timeout (steward/db/sqlite.py).
        # Counted open (steward/db/retry.py): a retried function called in here
        # leaves the re-run to the caller's, whose transaction the database
        # rolled back as a whole.
        with retry.opened(), self._writers, self._writer_factory() as session:
            with session.begin():
                yield session

    def wait_reachable(self):
        """Before a service's start-up work (migrations, the conductor's first
        sweep): try to connect ``[database] max_retries`` times (-1: forever),
        ``retry_interval`` seconds apart, as oslo.db's engines do at start; the
        last failure is raised."""
        from oslo_db import exception as db_exc
        attempts = CONF.database.max_retries
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.engine.connect():
                    return
            except (db_exc.DBConnectionError, sa.exc.OperationalError) as err:
                if 0 <= attempts <= attempt:
                    raise
                LOG.warning('Database unreachable (attempt %d%s): %s; retrying in %d s',
                            attempt, f' of {attempts}' if attempts >= 0 else '',
                            str(err).splitlines()[0], CONF.database.retry_interval)
                time.sleep(CONF.database.retry_interval)

    def ping(self):
        """One ``SELECT 1`` on a connection of the pool: raises while the database
        does not answer (/healthcheck's check)."""
        with self.engine.connect() as conn:
            conn.execute(sa.text('SELECT 1'))

    def _engines(self):
        return [self.engine] + ([self._autocommit_pool] if self._autocommit_pool else [])

    def dispose(self):
        """Close the pooled connections (the engine opens new ones if used again)."""
        for engine in self._engines():
            engine.dispose()

    def after_fork(self):
        """In a forked worker: drop the pooled connections of the parent without
        closing them (they are the parent's)."""
        for engine in self._engines():
            engine.dispose(close=False)

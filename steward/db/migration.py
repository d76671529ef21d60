"""Schema migrations (Alembic) and the online data migrations.

A database may be at a revision this code does not know: a newer release ran
``steward-manage db sync`` while this one still runs (a rolling upgrade). That
schema only added to the one this code knows (doc/contributor/schema-changes.md,
tests/unit/test_schema_changes.py), so it is served as it is: ``schema_state``
says ``newer`` and ``upgrade`` leaves it alone instead of failing on the unknown
revision.
"""
import logging
import os
from typing import NamedTuple

from alembic import command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import script as alembic_script
import sqlalchemy as sa


LOG = logging.getLogger(__name__)
_DIR = os.path.join(os.path.dirname(__file__), 'migrations')
# The PostgreSQL advisory lock key migrations hold (b'stewardm' as a big-endian
# int64): any value works, as long as every Steward process uses the same.
MIGRATION_LOCK_KEY = 0x737465776172646d
# MariaDB/MySQL's named lock of the same (per server; a database name in it keeps
# two Steward databases on one server apart).
MYSQL_LOCK_NAME = 'steward-migrate-{database}'
# MariaDB/MySQL: how long one DDL statement of a migration waits for the
# transactions using its table, and how many times the migration is tried again
# when that runs out (about three minutes in all). While an ALTER waits for its
# table's metadata lock, every new statement on that table queues behind it: a
# bind holding a row another transaction needs, which in turn queues behind the
# ALTER, closes a cycle no deadlock detector sees, and the services stalled for
# innodb_lock_wait_timeout (50 s) before the ALTER gave up (seen in
# tests/multihost/test_rolling_upgrade.py under load). Waiting a few seconds at
# a time lets the cycle break and the services go on between the tries.
MYSQL_DDL_LOCK_WAIT = 5
MYSQL_DDL_TRIES = 36
_LOCK_WAIT_TIMEOUT = 1205


def _config(connection=None):
    cfg = alembic_config.Config(os.path.join(_DIR, 'alembic.ini'))
    cfg.set_main_option('script_location', _DIR)
    cfg.attributes['connection'] = connection
    return cfg


def _ensure_sqlite_dir(url):
    if url.startswith('sqlite:///') and not url.startswith('sqlite:///:memory:'):
        os.makedirs(os.path.dirname(os.path.abspath(url[len('sqlite:///'):])),
                    exist_ok=True)


class SchemaState(NamedTuple):
    """The database's revision (``current``, None: no Steward schema) beside the
    newest this code knows (``head``)."""
    current: str | None
    head: str
    known: frozenset

    @property
    def relation(self):
        """``current``, ``older`` (migrations of this release not applied; no
        schema at all is older too) or ``newer`` (a revision of a later release)."""
        if self.current == self.head:
            return 'current'
        if self.current is None or self.current in self.known:
            return 'older'
        return 'newer'

    def describe(self):
        return {'current': f'at revision {self.head}, this release\'s newest',
                'older': (f'at revision {self.current}, older than this release\'s '
                          f'{self.head}' if self.current else
                          f'empty (no Steward schema; this release\'s is {self.head})'),
                'newer': (f'at revision {self.current}, newer than this release knows '
                          f'(its newest is {self.head}): a later release migrated it; '
                          f'its migrations only add, this release serves on it '
                          f'(doc/contributor/schema-changes.md)')}[self.relation]


def _script():
    return alembic_script.ScriptDirectory.from_config(_config())


def _state_on(conn):
    script = _script()
    current = alembic_migration.MigrationContext.configure(conn).get_current_revision()
    return SchemaState(current, script.get_current_head(),
                       frozenset(r.revision for r in script.walk_revisions()))


def schema_state(database):
    """The SchemaState of ``database`` (reads it; raises the driver's error when it
    cannot be reached)."""
    with database.engine.connect() as conn:
        return _state_on(conn)


def upgrade(database, revision='head'):
    """Migrate to ``revision``. On PostgreSQL the migration holds an advisory lock
    for its transaction, on MariaDB/MySQL a named lock for its session: two
    conductors starting together do not both migrate, the second waits and then
    finds nothing left to do. SQLite admits one writer at a time already.
    (MariaDB commits each DDL statement on its own: a migration that fails there
    half way leaves what it did; each migration checks its data before its first
    DDL statement.) A database a later release migrated is left as it is. Returns
    the SchemaState found before migrating."""
    _ensure_sqlite_dir(database.url)
    with database.engine.connect() as conn:
        if conn.dialect.name == 'mysql':
            name = MYSQL_LOCK_NAME.format(database=conn.engine.url.database)[:64]
            # Waits as long as a migration may take; 0 would be "not at all".
            got = conn.execute(sa.text('SELECT GET_LOCK(:name, 3600)'),
                               {'name': name}).scalar()
            conn.commit()     # the lock is the session's, not the transaction's
            if got != 1:
                raise RuntimeError(f'could not take the migration lock {name!r}')
            try:
                state = _upgrade_waiting_briefly(conn, revision)
            finally:
                conn.execute(sa.text('SELECT RELEASE_LOCK(:name)'), {'name': name})
                conn.commit()
            return state
        with conn.begin():
            if conn.dialect.name == 'postgresql':
                conn.execute(sa.text('SELECT pg_advisory_xact_lock(:key)'),
                             {'key': MIGRATION_LOCK_KEY})
            return _upgrade_known(conn, revision)


def _upgrade_waiting_briefly(conn, revision):
    """MariaDB/MySQL: migrate with each statement waiting at most
    MYSQL_DDL_LOCK_WAIT seconds for the table's users, and again from where it
    stopped when one ran out (every migration skips the steps already done:
    doc/contributor/schema-changes.md). The state found first."""
    wait = int(MYSQL_DDL_LOCK_WAIT)
    conn.exec_driver_sql(f'SET SESSION lock_wait_timeout = {wait}, '
                         f'innodb_lock_wait_timeout = {wait}')
    conn.commit()
    with conn.begin():
        first = _state_on(conn)
    for attempt in range(1, MYSQL_DDL_TRIES + 1):
        try:
            with conn.begin():
                _upgrade_known(conn, revision)
            return first
        except Exception as err:    # noqa: BLE001 - re-raised unless a lock wait
            if _mysql_code(err) != _LOCK_WAIT_TIMEOUT or attempt == MYSQL_DDL_TRIES:
                raise
            LOG.warning('Migration waited %s s for transactions using its table; '
                        'trying again (%d of %d): %s', wait, attempt, MYSQL_DDL_TRIES,
                        getattr(err, 'statement', None) or err)
    raise AssertionError('unreachable')


def _mysql_code(err):
    """The MySQL error number under ``err`` (oslo.db's exceptions wrap
    SQLAlchemy's, which wrap the driver's), or None."""
    while err is not None:
        args = getattr(err, 'args', ())
        if type(err).__module__.startswith(('pymysql', 'MySQLdb')) and args and \
                isinstance(args[0], int):
            return args[0]
        err = getattr(err, 'orig', None) or getattr(err, 'inner_exception', None)
    return None


def _upgrade_known(conn, revision):
    """Under the migration lock: migrate unless a later release already did
    (Alembic would fail on the revision it cannot locate). The state found."""
    state = _state_on(conn)
    if state.relation == 'newer':
        LOG.warning('Not migrating: the database schema is %s', state.describe())
        return state
    command.upgrade(_config(conn), revision)
    return state


def current_revision(database):
    with database.engine.connect() as conn:
        return alembic_migration.MigrationContext.configure(conn).get_current_revision()


def head_revision():
    return _script().get_current_head()

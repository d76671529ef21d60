"""Schema migrations (Alembic) and the online data migrations."""
import logging
import os

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


def _config(connection=None):
    cfg = alembic_config.Config(os.path.join(_DIR, 'alembic.ini'))
    cfg.set_main_option('script_location', _DIR)
    cfg.attributes['connection'] = connection
    return cfg


def _ensure_sqlite_dir(url):
    if url.startswith('sqlite:///') and not url.startswith('sqlite:///:memory:'):
        os.makedirs(os.path.dirname(os.path.abspath(url[len('sqlite:///'):])),
                    exist_ok=True)


def upgrade(database, revision='head'):
    """Migrate to ``revision``. On PostgreSQL the migration holds an advisory lock
    for its transaction, on MariaDB/MySQL a named lock for its session: two
    conductors starting together do not both migrate, the second waits and then
    finds nothing left to do. SQLite admits one writer at a time already.
    (MariaDB commits each DDL statement on its own: a migration that fails there
    half way leaves what it did; each migration checks its data before its first
    DDL statement.)"""
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
                with conn.begin():
                    command.upgrade(_config(conn), revision)
            finally:
                conn.execute(sa.text('SELECT RELEASE_LOCK(:name)'), {'name': name})
                conn.commit()
            return
        with conn.begin():
            if conn.dialect.name == 'postgresql':
                conn.execute(sa.text('SELECT pg_advisory_xact_lock(:key)'),
                             {'key': MIGRATION_LOCK_KEY})
            command.upgrade(_config(conn), revision)


def current_revision(database):
    with database.engine.connect() as conn:
        return alembic_migration.MigrationContext.configure(conn).get_current_revision()


def head_revision():
    return alembic_script.ScriptDirectory.from_config(_config()).get_current_head()

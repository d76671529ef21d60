"""``[database]``: oslo.db's own options (what every OpenStack service reads
there: pool, recycle, ``mysql_sql_mode``, connection and deadlock retries) with
Steward's defaults, and Steward's two extras beside them."""
import copy

from oslo_config import cfg
from oslo_db import options as oslo_db_options

group = cfg.OptGroup('database', title='Database options', help=(
    "Steward's own database: SQLite, PostgreSQL or MariaDB/MySQL (Galera "
    "included), one schema and one set of migrations on all three. The options "
    "are oslo.db's, as every OpenStack service reads them here, with Steward's "
    "defaults, and two of Steward's (sqlite_busy_timeout, sync_on_startup). A "
    "write transaction the database refuses as a deadlock (on Galera: a "
    "certification failure) runs again from its start, up to db_max_retries "
    "times with db_retry_interval seconds between tries (jittered, growing to "
    "db_max_retry_interval); past that, or while the database is unreachable, "
    "the API answers 503 cyb.service.unavailable. max_retries and retry_interval "
    "are the connection attempts when a service starts."))

# Steward's defaults for oslo.db's options: one host needs no server (SQLite in
# state_path); a bind waits for its transaction, so deadlock retries stay within
# the API's RPC timeout (Placement retries its writes 5 times too).
_DEFAULTS = {
    'connection': 'sqlite:///$state_path/steward.sqlite',
    'max_pool_size': 10,
    'db_max_retries': 5,
}

_HELP = {
    'connection': 'SQLAlchemy URL. SQLite for one host; PostgreSQL '
                  '(postgresql+psycopg://...) or MariaDB/MySQL, Galera included '
                  '(mysql+mysqldb://...?charset=utf8mb4, the ``mysql`` extra; '
                  'mysql+pymysql:// too) when several hosts share it.',
    'db_max_retries': 'Times a write transaction that failed on a deadlock (on '
                      'Galera: a certification failure) is run again from its '
                      'start before the error is raised (the API answers 503). -1: '
                      'no limit.',
}

# Options of oslo.db that Steward does not read: an engine per process, no
# replica, no asyncio engine, no DBAPI backend loader.
_UNUSED = ('backend', 'slave_connection', 'asyncio_connection',
           'asyncio_slave_connection', 'synchronous_reader', 'use_db_reconnect',
           'sqlite_synchronous')


def _oslo_db_opts():
    out = []
    for opt in oslo_db_options.database_opts:
        if opt.name in _UNUSED:
            continue
        opt = copy.copy(opt)
        if opt.name in _DEFAULTS:
            opt.default = _DEFAULTS[opt.name]
        if opt.name in _HELP:
            opt.help = _HELP[opt.name]
        out.append(opt)
    return out


steward_opts = [
    cfg.IntOpt('sqlite_busy_timeout', default=30000, min=0,
               help='Milliseconds a SQLite writer waits for the write lock.'),
    # NOTE: unset by default, and then it depends on the service: a service of a
    # multi-host deployment migrating at start is what made an old conductor,
    # restarted mid-upgrade on the new release's schema, crash-loop (issue 37).
    cfg.BoolOpt('sync_on_startup', default=None,
                help='Apply the schema migrations when a service starts. Unset (the '
                     'default): steward serve does (one host, nothing older runs '
                     'beside it) and steward api and steward conductor do not: the '
                     'operator runs "steward-manage db sync", as for every '
                     'OpenStack service, and a service that finds the schema older '
                     'than its release needs exits with that advice (exit status '
                     '3). true or false: every service does, or none does. A schema '
                     'newer than the service knows (a later release migrated it) is '
                     'never migrated at start: the service logs it and serves '
                     '(doc/contributor/schema-changes.md).'),
]

opts = _oslo_db_opts() + steward_opts


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

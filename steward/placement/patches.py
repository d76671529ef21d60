"""Steward's patches to the private internals of Placement and the libraries it
runs on, each guarded by the release series it was written for.

Each patch names the distribution whose internals it touches and the major
version it was read against (``@written_for``). On another major version it is
not applied: a patch the embedded Placement cannot be correct without (its
engine started apart from the host's configuration, its SQLite writers ordered)
refuses to start, naming the patch; a patch that only makes Placement faster or
quieter is skipped with a WARNING and Placement runs as upstream wrote it.
tests/functional/test_placement_patches.py tests each patch's effect and each
guard.
"""
import dataclasses
from importlib import metadata
import logging
import threading

from steward.common import exception
from steward.db import sqlite

LOG = logging.getLogger(__name__)

# Milliseconds a writer of the embedded Placement's SQLite file waits for its turn
# in the process, then for SQLite's lock (a first registration of thousands of
# providers keeps both workers writing).
BUSY_TIMEOUT_MS = 30000
# SQLite connections kept open for the server's threads (see
# pool_sqlite_connections); beyond it up to as many more are opened and closed.
_POOL_SIZE = 8


@dataclasses.dataclass(frozen=True)
class Guard:
    distribution: str
    major: int
    required: bool       # True: refuse to start on another version; False: skip


def installed_major(distribution):
    return int(metadata.version(distribution).split('.')[0])


def written_for(distribution, major, required=False):
    """Declare the release series a patch was written for (see apply)."""
    def mark(fn):
        fn.guard = Guard(distribution, major, required)
        return fn
    return mark


def apply(patch, *args):
    """Run ``patch(*args)`` when the installed version is the one it was written
    for: True. Otherwise refuse (InvalidConfiguration) or skip with a WARNING:
    False."""
    guard = patch.guard
    found = metadata.version(guard.distribution)
    if installed_major(guard.distribution) == guard.major:
        patch(*args)
        return True
    what = (f'the embedded Placement patch {patch.__name__} was written for '
            f'{guard.distribution} {guard.major}.x and {found} is installed')
    if guard.required:
        raise exception.InvalidConfiguration(
            reason=f'{what}; the embedded Placement needs it to be correct: update '
                   f'steward/placement/patches.py for that version, or install '
                   f'{guard.distribution} {guard.major}.x')
    LOG.warning('%s: skipped (Placement runs as upstream wrote it, only slower)', what)
    return False


@written_for('oslo.log', 8)
def register_quietly(conf):
    """placement.conf.register_opts without its side effects on host logging.

    It calls oslo.log's register_options, which adds a stderr handler to the root
    logger when it has none and makes this private conf the one oslo.log formatters
    built without a config read; both belong to the host process.
    """
    import placement.conf
    from oslo_log import formatters

    root = logging.getLogger()
    before, saved_conf = list(root.handlers), formatters._CONF
    try:
        placement.conf.register_opts(conf)
    finally:
        formatters._CONF = saved_conf
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)


@written_for('oslo.db', 18, required=True)
def start_engine_apart(factory):
    """Left to itself, oslo.db starts the engine facade with the global cfg.CONF
    and registers its own [database] options there, which clash with Steward's
    [database] group (DuplicateOptError in whichever registers second). Starting
    it with conf=None takes every setting from the [placement_database] values
    configure() passed; there is no public API for that, hence the private one."""
    factory._start(conf=None)


@written_for('oslo.db', 18, required=True)
def serialize_sqlite_writers(engine):
    """Make concurrent writers queue instead of failing with 'database is locked'.

    oslo.db emits a deferred BEGIN; two writers then both take a read lock, one fails
    to upgrade it at once and Placement answers HTTP 500 where it should answer 409,
    which breaks every generation-retry loop. The outermost transaction of a thread
    becomes BEGIN IMMEDIATE (writers wait at most BUSY_TIMEOUT_MS for their turn, then for SQLite's lock); nested
    transactions in the same thread (Placement's reader.independent inside its
    allocation retry loop) keep a plain BEGIN, else they wait on their own lock.
    oslo.db's listener is removed, not pre-empted: insert=True does not order a
    listener ahead of it (SQLAlchemy 2.1).
    """
    import sqlalchemy

    depth = threading.local()
    # The outermost transactions of this process's threads queue before BEGIN
    # IMMEDIATE, bounded (steward/db/sqlite.py, the setup Steward's own database
    # has); the child's worker processes meet in SQLite's busy handler.
    sqlite.configure(engine, BUSY_TIMEOUT_MS, foreign_keys=False)
    writers = sqlite.WriterLock(BUSY_TIMEOUT_MS / 1000)

    for fn in list(engine.dispatch.begin):
        if getattr(fn, '__name__', '') == '_sqlite_emit_begin':
            sqlalchemy.event.remove(engine, 'begin', fn)

    @sqlalchemy.event.listens_for(engine, 'begin')
    def _begin(conn):
        if 'in_transaction' in conn.info:
            return
        if conn.get_execution_options().get('steward_reader'):
            conn.exec_driver_sql('BEGIN')       # see readers_apart
            conn.info['in_transaction'] = True
            return
        level = getattr(depth, 'n', 0)
        if not level:
            writers.acquire()
            conn.info['steward_writer_lock'] = True
        try:
            conn.exec_driver_sql('BEGIN' if level else 'BEGIN IMMEDIATE')
        except BaseException:
            if conn.info.pop('steward_writer_lock', None):
                writers.release()
            raise
        conn.info['in_transaction'] = True
        conn.info['steward_tx_counted'] = True
        depth.n = level + 1

    @sqlalchemy.event.listens_for(engine, 'commit')
    @sqlalchemy.event.listens_for(engine, 'rollback')
    def _end(conn):
        if conn.info.pop('steward_tx_counted', None):
            depth.n = max(0, getattr(depth, 'n', 1) - 1)
        if conn.info.pop('steward_writer_lock', None):
            writers.release()


@written_for('oslo.db', 18)
def pool_sqlite_connections(engine):
    """Keep SQLite connections open between transactions. oslo.db gives a file
    database a NullPool (a new connection, with its pragmas, for every
    transaction) and sleeps at each check-in so that eventlet's green threads get
    a turn; Placement here runs on real threads, and the two together were a
    third of the time of a provider creation."""
    import sqlalchemy
    from oslo_db.sqlalchemy import engines

    if sqlalchemy.event.contains(engine, 'checkin', engines._thread_yield):
        sqlalchemy.event.remove(engine, 'checkin', engines._thread_yield)
    old = engine.pool
    if not isinstance(old, sqlalchemy.pool.NullPool):
        return
    # NullPool.recreate()'s arguments, in a pool that keeps what it opened; the
    # listeners (_dispatch) go with it.
    engine.pool = sqlalchemy.pool.QueuePool(
        old._creator, pool_size=_POOL_SIZE, max_overflow=_POOL_SIZE,
        recycle=old._recycle, echo=old.echo, logging_name=old._orig_logging_name,
        # No ping before each use: a file database does not go away under an open
        # connection, and the ping was a query per transaction.
        reset_on_return=old._reset_on_return, pre_ping=False,
        _dispatch=old.dispatch, dialect=old._dialect)
    old.dispose()


@written_for('oslo.db', 18)
def readers_apart(factory, engine):
    """Placement's reader transactions (its enginefacade ``reader``) begin
    deferred and outside the writer queue: in WAL mode a reader needs no lock,
    and with the child's worker processes a provider's traits PUT (two reads, one
    write) spent a seventh of its time queued behind another worker's writes.
    oslo.db gives readers the writers' engine unless ``synchronous_reader`` is
    off (its guard against a lagging replica; one SQLite file has none)."""
    from oslo_db.sqlalchemy import orm

    readers = engine.execution_options(steward_reader=True)
    factory._reader_engine = readers
    factory._reader_maker = orm.get_maker(
        engine=readers, expire_on_commit=factory._writer_maker.kw.get(
            'expire_on_commit', False))
    factory.synchronous_reader = False


@written_for('openstack-placement', 16)
def check_schemas_once():
    """Placement validates every request body with ``jsonschema.validate``, which
    first checks the schema itself against its metaschema: a third of the CPU of a
    provider creation or a traits write. Its schemas are module constants, so each
    is checked once and its validator kept; the errors raised are the same."""
    import types

    import jsonschema
    from placement import util

    validators = {}

    def validate(instance, schema, format_checker=None):
        known = validators.get(id(schema))
        if known is None or known[0] is not schema:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            known = validators[id(schema)] = (
                schema, cls(schema, format_checker=format_checker))
        error = jsonschema.exceptions.best_match(known[1].iter_errors(instance))
        if error is not None:
            raise error

    util.jsonschema = types.SimpleNamespace(
        validate=validate, ValidationError=jsonschema.ValidationError,
        FormatChecker=jsonschema.FormatChecker)


@written_for('openstack-placement', 16)
def share_table_aliases():
    """Placement builds its queries from ``sa.alias(TABLE, name=...)`` of its module
    tables on every request, and SQLAlchemy then builds a fresh column collection
    for each alias: a quarter of the CPU of a provider creation. An alias of a
    table is an immutable construct, so one per (table, name) is built once and
    shared; aliases of anything else (subqueries) are built as before."""
    import importlib
    import pkgutil
    import types

    import sqlalchemy
    import placement.objects

    made = {}
    lock = threading.Lock()

    def alias(selectable, name=None, flat=False):
        if not isinstance(selectable, sqlalchemy.Table):
            return sqlalchemy.alias(selectable, name=name, flat=flat)
        key = (selectable, name, flat)
        found = made.get(key)
        if found is None:
            found = sqlalchemy.alias(selectable, name=name, flat=flat)
            # Its column collection is built here, not by two requests at once.
            found.c  # noqa: B018
            with lock:
                found = made.setdefault(key, found)
        return found

    shared = types.SimpleNamespace(**{k: v for k, v in vars(sqlalchemy).items()
                                      if not k.startswith('__')})
    shared.alias = alias
    for info in pkgutil.iter_modules(placement.objects.__path__):
        module = importlib.import_module(f'placement.objects.{info.name}')
        if getattr(module, 'sa', None) is sqlalchemy:
            module.sa = shared


@written_for('openstack-placement', 16)
def hash_candidates_by_mappings():
    """Placement gathers the candidates of a request in a set of
    ``AllocationRequest``; their ``__eq__`` compares the resources and the
    group-to-provider ``mappings``, their ``__hash__`` the resources only. Several
    one-unit groups over a host's one-unit providers give candidates that differ
    in their mappings only (each GPU once, in another order): they all hash alike,
    and every add compares with every candidate already in the set, two sets built
    per comparison. 1000 candidates of eight one-unit groups on one host of eight:
    12.8 s, 11.6 of them in those comparisons; 0.9 s with the mappings hashed. The
    hash now covers what ``__eq__`` compares (equal candidates still hash alike);
    which candidates are found, and how many, is unchanged."""
    from placement.objects import allocation_candidate

    def __hash__(self):  # noqa: N807 - the method it replaces
        return hash((frozenset(self.resource_requests),
                     frozenset((suffix, frozenset(providers))
                               for suffix, providers in self.mappings.items())))

    allocation_candidate.AllocationRequest.__hash__ = __hash__


@written_for('openstack-placement', 16)
def watch_candidate_generation():
    """Placement's ``_merge_candidates`` walks the combinations its
    ``_generate_areq_lists`` yields in one loop with no deadline: a request whose
    client has gone keeps a thread at full CPU until the product ends. Each
    combination now passes through steward/placement/candidate_watch.py, which
    stops the walk once the client has closed its connection, and warns when one
    runs long. The candidates, and their order, are Placement's."""
    from placement.objects import allocation_candidate

    from steward.placement import candidate_watch

    generate = allocation_candidate._generate_areq_lists
    if getattr(generate, 'steward_watched', False):
        return

    def watched_generation(rw_ctx, areq_lists_by_anchor, all_suffixes):
        return candidate_watch.watched(
            generate(rw_ctx, areq_lists_by_anchor, all_suffixes))

    watched_generation.steward_watched = True
    allocation_candidate._generate_areq_lists = watched_generation


@written_for('openstack-placement', 16)
def policy_from_defaults_only(conf):
    """The embedded Placement's policy is its defaults (noauth2, no files: see
    steward/placement/app.py). oslo.policy still looks for a policy file and policy
    directories on every request, raising and catching ConfigFilesNotFoundError
    each time; with the rules loaded once, it stops looking. (loadapp made the
    enforcer; placement.policy.get_enforcer() would parse the global cfg.CONF.)"""
    import placement.policy

    placement.policy.init(conf)
    enforcer = placement.policy._ENFORCER
    enforcer.load_rules()
    enforcer.use_conf = False

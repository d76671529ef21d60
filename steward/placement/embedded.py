"""Run the real OpenStack Placement (openstack-placement) for single-host stacks.

Three layers, each usable alone:

* ``build_app(url)`` - the Placement WSGI app on a private config (noauth2, schema
  migrated on load), with SQLite writers serialised (see ``_serialize_sqlite_writers``).
* ``serve(app, host, port)`` - a threaded wsgiref server in a daemon thread (tests).
* ``start_subprocess(...)`` / ``main()`` - the app in a child process that dies with
  its parent, served by gunicorn worker processes (steward/supervisor.py): how
  ``steward serve`` runs it.

Placement's database layer is global and configured once per process (its
``db_api.configure`` is ``@run_once``), so a process serves at most one Placement
database; ``build_app`` enforces that instead of silently using the first one.
"""
import argparse
import json
import logging
import os
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from wsgiref import simple_server

from steward.common import exception
from steward.common import lifetime
from steward.common import netutils
from steward.db import sqlite

LOG = logging.getLogger(__name__)

# The connection URL travels to the child in the environment, not argv: a MySQL URL
# carries a password that `ps` would show to every user of the host.
CONNECTION_ENV = 'STEWARD_PLACEMENT_CONNECTION'
# Lets the parent tell its own child's answer from another server's on the same port.
PID_HEADER = 'X-Steward-Placement-Pid'

# Milliseconds a writer of the embedded Placement's SQLite file waits for its turn
# in the process, then for SQLite's lock (a first registration of thousands of
# providers keeps both workers writing).
BUSY_TIMEOUT_MS = 30000

# SQLite connections kept open for the server's threads (see
# _pool_sqlite_connections); beyond it up to as many more are opened and closed.
_POOL_SIZE = 8

_build_lock = threading.Lock()
_built = {}   # 'url' once placement's DB layer is configured; 'app' once loaded


def build_app(connection_url):
    """The Placement WSGI app on ``connection_url``; one database per process.

    A repeated call with the same URL returns the same app; another URL raises
    InvalidConfiguration. Placement's oslo.log setup is deliberately not called: it
    would reconfigure the host process's logging. Its loggers propagate to whatever
    the host configured.
    """
    with _build_lock:
        if _built.get('url') not in (None, connection_url):
            raise exception.InvalidConfiguration(
                reason='this process already runs Placement on %s; Placement '
                       'configures its database once per process, so %s cannot be '
                       'served here' % (netutils.redacted_url(_built['url']),
                                        netutils.redacted_url(connection_url)))
        if _built.get('app') is not None:
            return _built['app']
        # Each step is recorded once done: if a later one fails (a bad URL, a locked
        # database) the DB layer stays configured for this URL and a retry with it
        # resumes where it stopped.
        if 'url' not in _built:
            _configure_db(connection_url)
        if 'engine' not in _built:
            _built['engine'] = _start_engine()
        import placement.deploy
        _check_schemas_once()
        _share_table_aliases()
        # Migrates the schema and syncs standard traits and resource classes.
        _built['app'] = placement.deploy.loadapp(_built['conf'])
        _policy_from_defaults_only(_built['conf'])
        return _built['app']


def _configure_db(connection_url):
    from oslo_config import cfg
    import placement.db_api

    if placement.db_api.configure.called:
        raise exception.InvalidConfiguration(
            reason="Placement's database layer was already configured in this "
                   'process by other code (an upstream PlacementFixture?)')
    path = sqlite.sqlite_file(connection_url)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    conf = cfg.ConfigOpts()
    _register_quietly(conf)
    # Overrides must precede parsing: connection is required and parsing checks it.
    conf.set_override('connection', connection_url, group='placement_database')
    conf.set_override('sync_on_startup', True, group='placement_database')
    conf.set_override('auth_strategy', 'noauth2', group='api')
    # No files and no directories: /etc/placement/placement.conf must not leak in.
    conf([], project='placement', default_config_files=[], default_config_dirs=[])
    placement.db_api.configure(conf)
    _built['url'], _built['conf'] = connection_url, conf


def _start_engine():
    import placement.db_api

    # Left to itself, oslo.db starts the engine facade with the global cfg.CONF and
    # registers its own [database] options there, which clash with Steward's
    # [database] group (DuplicateOptError in whichever registers second). Starting
    # it with conf=None takes every setting from the [placement_database] values
    # configure() passed; there is no public API for that, hence the private one.
    factory = getattr(placement.db_api.placement_context_manager, '_factory', None)
    if factory is None or not hasattr(factory, '_start'):
        raise exception.InvalidConfiguration(
            reason='this oslo.db has no enginefacade _factory._start; the embedded '
                   'Placement needs updating for it')
    factory._start(conf=None)
    engine = placement.db_api.get_placement_engine()
    if engine.dialect.name == 'sqlite':
        _serialize_sqlite_writers(engine)
        _pool_sqlite_connections(engine)
        _readers_apart(factory, engine)
    return engine


def _readers_apart(factory, engine):
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


def _pool_sqlite_connections(engine):
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


def _check_schemas_once():
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


def _share_table_aliases():
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


def _policy_from_defaults_only(conf):
    """The embedded Placement's policy is its defaults (noauth2, no files: see
    _configure_db). oslo.policy still looks for a policy file and policy
    directories on every request, raising and catching ConfigFilesNotFoundError
    each time; with the rules loaded once, it stops looking. (loadapp made the
    enforcer; placement.policy.get_enforcer() would parse the global cfg.CONF.)"""
    import placement.policy

    placement.policy.init(conf)
    enforcer = placement.policy._ENFORCER
    enforcer.load_rules()
    enforcer.use_conf = False


def _register_quietly(conf):
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


def _serialize_sqlite_writers(engine):
    """Make concurrent writers queue instead of failing with 'database is locked'.

    oslo.db emits a deferred BEGIN; two writers then both take a read lock, one fails
    to upgrade it at once and Placement answers HTTP 500 where it should answer 409,
    which breaks every generation-retry loop. The outermost transaction of a thread
    becomes BEGIN IMMEDIATE (writers wait on SQLite's 5 s busy timeout); nested
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
            conn.exec_driver_sql('BEGIN')       # see _readers_apart
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


# -- serving ------------------------------------------------------------------------
class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    # socketserver's default backlog (5) resets bursts of concurrent clients.
    request_queue_size = 128

    def server_bind(self):
        # HTTPServer.server_bind resolves getfqdn(host), a DNS lookup that can stall
        # startup for seconds on hosts with slow resolvers; the name is unused.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]
        self.setup_environ()

    def handle_error(self, request, client_address):
        # A client hanging up mid-response is routine; don't print tracebacks.
        LOG.debug('Error serving %s', client_address, exc_info=True)


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        pass   # Placement's requestlog middleware already logs every request




class EmbeddedServer:
    """A Placement app served from a daemon thread of this process."""

    def __init__(self, httpd, thread):
        self._httpd = httpd
        self._thread = thread
        self.host = httpd.server_address[0]
        self.port = httpd.server_address[1]
        self.url = netutils.local_url(self.host, self.port)

    def shutdown(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def serve(app, host='127.0.0.1', port=0):
    """Serve ``app`` on host:port (0 = a free port); returns once listening."""
    url = _built.get('url')
    if url is not None and sqlite.sqlite_file(url) == '':
        # In-memory SQLite is one connection shared by all threads: concurrent
        # requests over-commit allocations and can hang the server.
        raise exception.InvalidConfiguration(
            reason='in-memory SQLite Placement cannot be served by a threaded server; '
                   'use a file database')
    server_class = _ThreadingWSGIServer6 if ':' in host else _ThreadingWSGIServer
    httpd = simple_server.make_server(host, port, app, server_class=server_class,
                                      handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={'poll_interval': 0.2},
                              name='placement-%d' % httpd.server_address[1], daemon=True)
    thread.start()
    return EmbeddedServer(httpd, thread)


def _with_pid_header(app):
    pid = str(os.getpid())

    def wrapped(environ, start_response):
        def _start(status, headers, exc_info=None):
            return start_response(status, list(headers) + [(PID_HEADER, pid)], exc_info)
        return app(environ, _start)
    return wrapped


def _check_port_free(host, port):
    """Fail at once, naming the port, when it is taken: gunicorn would retry the
    bind for five seconds first."""
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip('[]'), port))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m steward.placement.embedded',
        description='Serve the real OpenStack Placement (noauth2: X-Auth-Token admin).')
    parser.add_argument('--connection', default=os.environ.get(CONNECTION_ENV),
                        help='database URL (default: $%s)' % CONNECTION_ENV)
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=8778)
    parser.add_argument('--workers', type=int, default=2,
                        help='processes serving requests (one request at a time each)')
    parser.add_argument('--log-level', default='INFO',
                        help='INFO logs one line per request (Placement requestlog)')
    args = parser.parse_args(argv)
    if not args.connection:
        parser.error('--connection or $%s is required' % CONNECTION_ENV)
    if args.workers < 1:
        parser.error('--workers must be at least 1')

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format='%(asctime)s %(process)d %(levelname)s %(name)s %(message)s')
    # Until gunicorn's arbiter takes SIGTERM/SIGINT (its handler only queues them,
    # on a reentrant queue), they have their default action: a stop during start-up
    # ends the process before it listens.
    url = netutils.local_url(args.host, args.port)
    try:
        _check_port_free(args.host, args.port)
        app = _with_pid_header(build_app(args.connection))
    except Exception as exc:  # noqa: BLE001 - the parent reads this from the log
        LOG.error('Embedded Placement failed to start on %s:%s: %s', args.host,
                  args.port, exc, exc_info=not isinstance(exc, OSError))
        return 1
    engine = _built['engine']
    # The workers are forked from here: none may inherit a pooled connection.
    engine.dispose()

    def on_ready():
        LOG.info('Placement listening on %s (pid %d, %d worker(s))', url, os.getpid(),
                 args.workers)

    from steward import supervisor
    # Kept-alive connections linger at most two seconds after a SIGTERM (Placement
    # answers in milliseconds); a worker is given two minutes for the largest
    # reshape or allocation-candidates query a host makes.
    supervisor.Supervisor(lambda: app, args.host, args.port, args.workers,
                          supervisor.WSGI_WORKER, graceful_timeout=2, timeout=120,
                          name='steward-placement',
                          on_fork=lambda: engine.dispose(close=False),
                          on_ready=on_ready).serve_forever()
    return 0


# -- child process ------------------------------------------------------------------
def _probe(url, timeout):
    """(status, pid header, JSON body or None) of GET url/, or None if nothing answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url + '/', timeout=timeout) as resp:
            status, pid, raw = resp.status, resp.headers.get(PID_HEADER), resp.read()
    except urllib.error.HTTPError as exc:
        status, pid, raw = exc.code, exc.headers.get(PID_HEADER), b''
    except (OSError, ValueError):
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return status, pid, body


def _is_placement_doc(body):
    return isinstance(body, dict) and isinstance(body.get('versions'), list)


def _tail(path, limit=4000):
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode('utf-8', 'replace').strip()
    except OSError as exc:
        return '(log unreadable: %s)' % exc


class EmbeddedProcess:
    """A Placement child process; ``stop()`` terminates it."""

    def __init__(self, proc, url, log_file, owns_log, host=None, port=None):
        self._proc = proc
        self.pid = proc.pid
        self.url = url
        self.log_file = log_file
        self._owns_log = owns_log
        self.host, self.port = host, port

    def wait_ready(self, timeout=30.0):
        """Wait until the child answers ``GET /`` (the answer carries its pid);
        stops it and raises EmbeddedPlacementError if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while True:
            rc = self._proc.poll()
            if rc is not None:
                tail = _tail(self.log_file)
                self._owns_log = False   # keep the log of a failed start for the operator
                self.stop()
                raise exception.EmbeddedPlacementError(
                    host=self.host, port=self.port,
                    reason='the child exited with status %s before answering; log %s '
                           'ends with:\n%s' % (rc, self.log_file, tail))
            found = _probe(self.url, 1.0)
            # Only our child's answer counts: another server may have taken the port.
            if found and found[0] == 200 and found[1] == str(self.pid):
                LOG.info('Embedded Placement (pid %d) answers on %s', self.pid, self.url)
                return self
            if time.monotonic() > deadline:
                tail = _tail(self.log_file)
                self._owns_log = False   # keep the log of a failed start for the operator
                self.stop()
                raise exception.EmbeddedPlacementError(
                    host=self.host, port=self.port,
                    reason='no answer to GET / within %.0f s; log %s ends with:\n%s'
                           % (timeout, self.log_file, tail))
            time.sleep(0.02)

    def stop(self, timeout=10.0):
        """Stop the child at once: SIGINT, which gunicorn takes as a quick stop.
        (Its SIGTERM, which the child also gets when this process dies, lets kept-
        alive connections linger for seconds; whoever calls stop() is done with
        Placement.)"""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._owns_log:
            try:
                os.unlink(self.log_file)
            except OSError:
                pass
        return self._proc.returncode


def start_subprocess(connection, host='127.0.0.1', port=8778, log_file=None,
                     timeout=30.0, wait=True, workers=2):
    """Start Placement in a child process and wait until it answers ``GET /``
    (``wait=False``: return at once; the caller calls ``wait_ready()`` later and
    does its own start-up meanwhile, on the other core).

    The child gets SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG). The
    signal follows the *thread* that forked, so call this from a long-lived thread
    (the main thread of a service). Without ``log_file`` the child logs to a
    temporary file removed by ``stop()``.
    """
    url = netutils.local_url(host, port)
    found = _probe(url, 1.0)
    if found and _is_placement_doc(found[2]):
        raise exception.EmbeddedPlacementError(
            host=host, port=port,
            reason='a Placement service already answers on port %d (not started by '
                   'this process); stop it or set [placement] embedded_port to a free '
                   'port' % port)

    owns_log = log_file is None
    if owns_log:
        fd, log_file = tempfile.mkstemp(prefix='steward-placement-', suffix='.log')
        log = os.fdopen(fd, 'ab')
    else:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        log = open(log_file, 'ab')

    env = dict(os.environ)
    env[CONNECTION_ENV] = connection
    # The child must import this very steward even when it is not installed.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env['PYTHONPATH'] = os.pathsep.join(p for p in (src, env.get('PYTHONPATH')) if p)
    with log:
        proc = subprocess.Popen(
            [sys.executable, '-m', 'steward.placement.embedded',
             '--host', host, '--port', str(port), '--workers', str(workers)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            close_fds=True, preexec_fn=lifetime.preexec_die_with_parent())
    child = EmbeddedProcess(proc, url, log_file, owns_log, host, port)
    if wait:
        child.wait_ready(timeout)
    return child


if __name__ == '__main__':
    sys.exit(main())

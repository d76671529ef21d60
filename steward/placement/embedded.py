"""The embedded Placement child: ``python -m steward.placement.embedded``.

Builds the app (steward/placement/app.py) once, then serves it from gunicorn
worker processes forked from here (steward/supervisor.py), which share it
copy-on-write. `steward serve` starts it through steward/placement/handle.py;
doc/multihost.md runs it alone on a controller.

Two lanes, each with worker processes of its own: ``--host``/``--port`` for Nova
and every other client (``--workers``), and with ``--steward-bind`` one for
Steward's own client (``--steward-workers``; `steward serve` gives it a Unix
socket). A query of allocation candidates that runs long holds a thread of the
first lane and never one of Steward's, whose writes (binds' reservations,
inventories, the drift repair) go on meanwhile.
"""
import argparse
import logging
import os
import socket
import sys

from steward.common import netutils
from steward.placement import app as app_mod
from steward.placement import candidate_watch
from steward.placement.handle import CONNECTION_ENV, PID_HEADER

LOG = logging.getLogger(__name__)
# Requests one worker process serves at once. Placement is CPU-bound Python, so
# threads add no throughput to a process; they keep a long request (a query of
# allocation candidates) from holding the whole process: the requests behind it
# take turns with it on the core instead of waiting for it to end. Each thread
# may hold one of the process's SQLite connections (patches._POOL_SIZE, 8).
THREADS = 4


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
                        help='processes serving --host:--port')
    parser.add_argument('--threads', type=int, default=THREADS,
                        help='requests each process serves at once (default %d)'
                             % THREADS)
    parser.add_argument('--steward-bind', metavar='ADDRESS',
                        help="a listener of its own for Steward's client, served by "
                             "--steward-workers processes: unix:PATH or HOST:PORT")
    parser.add_argument('--steward-workers', type=int, default=1,
                        help='processes serving --steward-bind (default 1)')
    parser.add_argument('--config-file', metavar='FILE',
                        help="Placement's options (placement.conf style: [placement] "
                             'max_allocation_candidates, ...); default: none, '
                             "Steward's defaults")
    parser.add_argument('--log-level', default='INFO',
                        help='INFO logs one line per request (Placement requestlog)')
    args = parser.parse_args(argv)
    if not args.connection:
        parser.error('--connection or $%s is required' % CONNECTION_ENV)
    for name in ('workers', 'threads', 'steward_workers'):
        if getattr(args, name) < 1:
            parser.error('--%s must be at least 1' % name.replace('_', '-'))

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format='%(asctime)s %(process)d %(levelname)s %(name)s %(message)s')
    # Until gunicorn's arbiter takes SIGTERM/SIGINT (its handler only queues them,
    # on a reentrant queue), they have their default action: a stop during start-up
    # ends the process before it listens.
    url = netutils.local_url(args.host, args.port)
    try:
        _check_port_free(args.host, args.port)
        app = _with_pid_header(candidate_watch.tracking(
            app_mod.build_app(args.connection, args.config_file)))
    except Exception as exc:  # noqa: BLE001 - the parent reads this from the log
        LOG.error('Embedded Placement failed to start on %s:%s: %s', args.host,
                  args.port, exc, exc_info=not isinstance(exc, OSError))
        return 1
    engine = app_mod.built_engine()
    # The workers are forked from here: none may inherit a pooled connection.
    engine.dispose()

    lanes = [(args.steward_bind, args.steward_workers)] if args.steward_bind else []

    def on_ready():
        LOG.info('Placement listening on %s (pid %d, %d worker(s) of %d thread(s))',
                 url, os.getpid(), args.workers, args.threads)
        if lanes:
            LOG.info("Placement listening for Steward's client on %s (%d worker(s))",
                     args.steward_bind, args.steward_workers)

    from steward import supervisor
    # Kept-alive connections linger at most two seconds after a SIGTERM (Placement
    # answers in milliseconds). The timeout is gunicorn's heartbeat, which a
    # threaded worker's main loop keeps whatever its threads are doing: it replaces
    # a hung worker, never a long request (candidate_watch.py stops an abandoned one).
    supervisor.Supervisor(lambda: app, args.host, args.port, args.workers,
                          supervisor.WSGI_WORKER, graceful_timeout=2, timeout=120,
                          name='steward-placement', threads=args.threads, lanes=lanes,
                          on_fork=lambda: engine.dispose(close=False),
                          on_ready=on_ready).serve_forever()
    return 0


if __name__ == '__main__':
    sys.exit(main())

"""The embedded Placement child: ``python -m steward.placement.embedded``.

Builds the app (steward/placement/app.py) once, then serves it from gunicorn
worker processes forked from here (steward/supervisor.py), which share it
copy-on-write. `steward serve` starts it through steward/placement/handle.py;
doc/multihost.md runs it alone on a controller.
"""
import argparse
import logging
import os
import socket
import sys

from steward.common import netutils
from steward.placement import app as app_mod
from steward.placement.handle import CONNECTION_ENV, PID_HEADER

LOG = logging.getLogger(__name__)


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
        app = _with_pid_header(app_mod.build_app(args.connection))
    except Exception as exc:  # noqa: BLE001 - the parent reads this from the log
        LOG.error('Embedded Placement failed to start on %s:%s: %s', args.host,
                  args.port, exc, exc_info=not isinstance(exc, OSError))
        return 1
    engine = app_mod.built_engine()
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


if __name__ == '__main__':
    sys.exit(main())

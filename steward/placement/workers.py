"""The embedded Placement child's HTTP server: gunicorn, with worker processes.

Placement is CPU-bound Python: one interpreter serves one request at a time
whatever its thread count, and threads only add contention for the GIL. So the
child forks ``workers`` processes after building the app (they share it
copy-on-write), each serving one request at a time on HTTP/1.1 keep-alive
connections (gunicorn's gthread worker with one thread). On SQLite, writers of
all the processes queue on one file lock (embedded._serialize_sqlite_writers).

The master is gunicorn's arbiter: SIGTERM stops the workers gracefully (kept-alive
connections linger up to two seconds), SIGINT at once, and a worker that dies is
replaced. Workers follow the master's death
(PR_SET_PDEATHSIG), as the master follows Steward's.
"""
import logging
import os

from gunicorn.app import base

from steward.common import lifetime

LOG = logging.getLogger(__name__)

# Seconds a SIGTERM waits for requests in flight (Placement answers in
# milliseconds) before the workers are killed.
GRACEFUL_TIMEOUT = 2
# A worker silent this long is killed and replaced; large enough for the largest
# reshape or allocation-candidates query a host makes.
WORKER_TIMEOUT = 120
# Idle client connections kept, as the Steward API does (service.HTTP_KEEP_ALIVE).
KEEP_ALIVE = 75


class PlacementServer(base.BaseApplication):
    """gunicorn serving an app built in this (master) process."""

    def __init__(self, app, host, port, workers, on_fork=None, on_ready=None):
        self._app = app
        self._bind = f'[{host}]:{port}' if ':' in host else f'{host}:{port}'
        self._workers = workers
        self._on_fork = on_fork
        self._on_ready = on_ready
        super().__init__()

    def load_config(self):
        master = os.getpid()

        def post_fork(_server, _worker):
            lifetime.die_with_parent(master)
            if self._on_fork is not None:
                self._on_fork()

        def when_ready(_server):
            if self._on_ready is not None:
                self._on_ready()

        for name, value in {
                'bind': [self._bind],
                'workers': self._workers,
                'worker_class': 'gthread',
                'threads': 1,
                'keepalive': KEEP_ALIVE,
                'timeout': WORKER_TIMEOUT,
                'graceful_timeout': GRACEFUL_TIMEOUT,
                # socketserver's backlog of 5 once reset bursts of clients.
                'backlog': 128,
                # No control socket in the home directory, no access log (Placement's
                # requestlog logs each request), warnings and errors of gunicorn.
                'control_socket_disable': True,
                'accesslog': None,
                'errorlog': '-',
                'loglevel': 'warning',
                'proc_name': 'steward-placement',
                'post_fork': post_fork,
                'when_ready': when_ready}.items():
            self.cfg.set(name, value)

    def load(self):
        return self._app


def serve_forever(app, host, port, workers, on_fork=None, on_ready=None):
    """Serve ``app`` until SIGTERM/SIGINT; ``on_fork`` runs in each new worker,
    ``on_ready`` in the master once it listens. Exits the process (gunicorn's
    arbiter ends with sys.exit): status 0 on a signal, 1 when it cannot bind."""
    PlacementServer(app, host, port, workers, on_fork, on_ready).run()

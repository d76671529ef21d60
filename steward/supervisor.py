"""The one process supervisor of the tree: gunicorn.

Where a Steward command serves HTTP from several processes - `steward api` with
``[api] workers`` > 1, the embedded Placement's ``[placement] embedded_workers`` -
gunicorn's arbiter forks the workers, replaces one that dies, stops them on
SIGTERM (gracefully) or SIGINT (at once), and on SIGHUP calls ``on_reload`` and
then replaces every worker by a new one, forked after the reload. Steward adds
one thing: every worker gets SIGTERM when the arbiter dies, SIGKILL included
(PR_SET_PDEATHSIG), so a worker never outlives its service and keeps its port.

The API's workers are uvicorn's gunicorn worker class (uvicorn-worker): uvicorn
serves, gunicorn supervises, and the workers keep their shares of the clients'
connections even (steward/connection_share.py). `steward serve` and `steward api` with one worker run
uvicorn in their own process, with no supervisor at all.
"""
import os
import sys

from gunicorn.app import base
from gunicorn.arbiter import Arbiter
from uvicorn.server import Server
from uvicorn_worker import UvicornWorker

from steward import connection_share
from steward import lifetime


class ApiWorker(UvicornWorker):
    """uvicorn in a gunicorn worker, as `steward api` runs it in one process: no
    lifespan events, no access log (one line per request is the API's own), no
    proxy headers (the API's own, from [api] trusted_proxies only)."""
    CONFIG_KWARGS = {'loop': 'auto', 'http': 'auto', 'lifespan': 'off',
                     'access_log': False, 'proxy_headers': False}
    # (ShareTable, slot) when the arbiter shares the connections (set before the fork).
    connection_share = None

    async def _serve(self):
        # UvicornWorker._serve, with this worker's connections counted into its
        # slot and its app told when to move one.
        server = Server(config=self.config)
        self.config.app = self.wsgi
        if self.connection_share is not None and self.connection_share[1] is not None:
            connections = connection_share.WorkerConnections(*self.connection_share)
            server.server_state.connections = connections
            self.config.app = connection_share.Rebalancing(self.wsgi, connections)
        self._install_sigquit_handler()
        await server.serve(sockets=self.sockets)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)


API_WORKER = f'{__name__}.ApiWorker'
# Placement: one request at a time per process (it is CPU-bound Python), on
# HTTP/1.1 keep-alive connections.
WSGI_WORKER = 'gthread'


def bind_address(host, port):
    return f'[{host}]:{port}' if ':' in host else f'{host}:{port}'


class Supervisor(base.BaseApplication):
    """gunicorn serving what ``load()`` returns (called in each worker; or once
    in the arbiter, before it forks, with ``preload=True``)."""

    def __init__(self, load, host, port, workers, worker_class, *, preload=False,
                 keepalive=75, graceful_timeout=10, timeout=120, name='steward',
                 on_fork=None, on_ready=None, on_child_exit=None, on_reload=None,
                 share_connections=False):
        self._load = load
        # Room for the workers of a reload (gunicorn forks the new ones before
        # the old ones stop) and for a few more added by TTIN.
        self._share = connection_share.ShareTable(4 * workers + 4) \
            if share_connections else None
        self._options = {
            'bind': [bind_address(host, port)],
            'workers': workers,
            'worker_class': worker_class,
            'threads': 1,
            'preload_app': preload,
            'keepalive': keepalive,
            # Seconds a SIGTERM waits for requests in flight before the workers
            # are killed, and a worker silent this long is killed and replaced.
            'graceful_timeout': graceful_timeout,
            'timeout': timeout,
            # socketserver's backlog of 5 once reset bursts of clients.
            'backlog': 2048,
            # No control socket in the home directory, no access log, gunicorn's
            # warnings and errors.
            'control_socket_disable': True,
            'accesslog': None,
            'errorlog': '-',
            'loglevel': 'warning',
            'proc_name': name,
        }
        self._on_fork = on_fork
        self._on_ready = on_ready
        self._on_child_exit = on_child_exit
        self._on_reload = on_reload
        super().__init__()

    def load_config(self):
        arbiter = os.getpid()

        def post_fork(_server, _worker):
            lifetime.die_with_parent(arbiter)
            if self._on_fork is not None:
                self._on_fork()

        def when_ready(_server):
            if self._on_ready is not None:
                self._on_ready()

        def pre_fork(_server, worker):
            if self._share is not None:
                worker.connection_share = (self._share, self._share.claim())

        def child_exit(_server, worker):
            if self._share is not None:
                self._share.release(worker.connection_share[1])
            if self._on_child_exit is not None:
                self._on_child_exit(worker.pid)

        def on_reload(_arbiter):
            # gunicorn's HUP: called in the arbiter before it forks the new
            # workers, which inherit what it reloads (the configuration).
            if self._on_reload is not None:
                self._on_reload()

        for name, value in dict(self._options, pre_fork=pre_fork, post_fork=post_fork,
                                when_ready=when_ready, child_exit=child_exit,
                                on_reload=on_reload).items():
            self.cfg.set(name, value)

    def load(self):
        return self._load()

    def serve_forever(self):
        """Until SIGTERM/SIGINT; ends the process (gunicorn's arbiter exits with
        sys.exit): status 0 on a signal, 1 when it cannot bind."""
        self.run()

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
# Placement: gunicorn's threaded worker, on HTTP/1.1 keep-alive connections. Its
# main thread accepts and queues every connection (up to worker_connections)
# whatever its threads are doing: a worker whose threads are all held by long
# requests keeps taking new ones, which wait (see Supervisor's lanes).
WSGI_WORKER = 'gthread'


def bind_address(host, port):
    return f'[{host}]:{port}' if ':' in host else f'{host}:{port}'


class Supervisor(base.BaseApplication):
    """gunicorn serving what ``load()`` returns (called in each worker; or once
    in the arbiter, before it forks, with ``preload=True``).

    ``lanes``: more listeners, each ``(gunicorn bind address, workers)`` with
    worker processes of its own. A worker accepts on its lane's listener only
    (``host:port`` is the first lane, with ``workers``), so what one lane's clients
    send never occupies another lane's workers; gunicorn replaces a dead worker
    in the lane it leaves short."""

    def __init__(self, load, host, port, workers, worker_class, *, preload=False,
                 keepalive=75, graceful_timeout=10, timeout=120, name='steward',
                 on_fork=None, on_ready=None, on_child_exit=None, on_reload=None,
                 share_connections=False, threads=1, lanes=()):
        self._load = load
        self._lanes = [(bind_address(host, port), workers)] + list(lanes)
        # Room for the workers of a reload (gunicorn forks the new ones before
        # the old ones stop) and for a few more added by TTIN.
        self._share = connection_share.ShareTable(4 * workers + 4) \
            if share_connections else None
        self._options = {
            'bind': [address for address, _ in self._lanes],
            'workers': sum(n for _, n in self._lanes),
            'worker_class': worker_class,
            'threads': threads,
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

        def pre_fork(server, worker):
            if self._share is not None:
                worker.connection_share = (self._share, self._share.claim())
            if len(self._lanes) > 1:
                self._assign_lane(server, worker)

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

    def _assign_lane(self, arbiter, worker):
        """Put ``worker`` (not yet forked) in the lane that has the smallest share
        of its workers: at start each lane fills up in turn; afterwards the one a
        dead worker left. Its listeners are then its lane's alone (gunicorn listens
        on every bind address in the arbiter, in their order, and hands them all
        to each worker)."""
        running = [0] * len(self._lanes)
        for other in arbiter.WORKERS.values():
            running[getattr(other, 'steward_lane', 0)] += 1
        lane = min(range(len(self._lanes)),
                   key=lambda i: (running[i] / self._lanes[i][1], i))
        worker.steward_lane = lane
        worker.sockets = [arbiter.LISTENERS[lane]]

    def load(self):
        return self._load()

    def serve_forever(self):
        """Until SIGTERM/SIGINT; ends the process (gunicorn's arbiter exits with
        sys.exit): status 0 on a signal, 1 when it cannot bind."""
        self.run()

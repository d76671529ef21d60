"""One Steward process, whichever command it runs: configuration and logging, and
its ``Lifecycle`` (the HTTP server of the API, and the stop: signals, a stop from
another thread, the exit status), which the command's composition root owns."""
import gc
import logging as pylogging
import os
import signal
import sys
import threading
import warnings

from oslo_log import log as logging

from steward.conf import CONF

LOG = logging.getLogger(__name__)


def prepare(argv, default_config_files=None, default_config_dirs=None):
    """Parse configuration and set up logging. ``argv`` excludes the command."""
    warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')
    # oslo.log's options are registered once per process: CONF itself says whether
    # they are (its CLI options cannot be registered again once CONF was parsed).
    if 'debug' not in CONF:
        logging.register_options(CONF)
    CONF(argv, project='steward', default_config_files=default_config_files,
         default_config_dirs=default_config_dirs)
    logging.setup(CONF, 'steward')
    for noisy in ('stevedore', 'oslo.messaging', 'oslo_messaging', 'kombu', 'amqp',
                  'keystoneauth', 'urllib3', 'alembic'):
        pylogging.getLogger(noisy).setLevel(pylogging.WARNING)
    os.makedirs(CONF.state_path, exist_ok=True)


def settle_heap():
    """Once a service has started: move everything built so far (modules, the
    configuration, the app, pools) out of the collector's sight. Python's full
    collections walk every tracked object, and a listing that builds tens of
    thousands of rows triggered several per request: most of a 10 000-device
    listing's time was spent walking start-up objects that never die."""
    gc.collect()
    gc.freeze()


def _quiet_exit_server(config):
    """A uvicorn.Server that does not re-raise SIGTERM/SIGINT once it has shut down
    (uvicorn >= 0.29 does): the default handler would kill the process before the
    caller's orderly stop (agent, RPC servers, conductor, Placement) ran, and it
    would exit -15 instead of its status."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            super().handle_exit(sig, frame)
            getattr(self, '_captured_signals', []).clear()

    return Server(config)


# Seconds an idle client connection is kept open. uvicorn's 5 s closes the pooled
# connection of a client (Nova between two boots) just as it may send on it again:
# a POST that meets the close is lost ("server disconnected"), and is not retried.
# 75 s, nginx's default, leaves that race to clients idle for over a minute.
HTTP_KEEP_ALIVE = 75


# proxy_headers off: the app honours a proxy's headers from [api] trusted_proxies
# only (steward/api/proxy.py); uvicorn's own would also trust any loopback peer.
_HTTP_OPTIONS = dict(log_level='warning', access_log=False, lifespan='off',
                     timeout_keep_alive=HTTP_KEEP_ALIVE, proxy_headers=False)


class Lifecycle:
    """How this process's service ends: the status its command returns, the HTTP
    server to stop, the signal received. Plain attributes: a signal handler only
    assigns (taking a lock there can deadlock when a second signal interrupts the
    first handler)."""

    def __init__(self):
        self.status = 0
        self._server = None
        self._signal = None
        self._stop_requested = threading.Event()

    def run_http(self, app, host, port):
        """Serve ``app`` in this process until SIGTERM/SIGINT or stop()."""
        import uvicorn
        LOG.info('Steward API listening on http://%s:%s/v2', host, port)
        server = _quiet_exit_server(uvicorn.Config(app, host=host.strip('[]'), port=port,
                                                   backlog=2048, **_HTTP_OPTIONS))
        self._server = server           # stop() ends it
        if self._stop_requested.is_set():
            return
        try:
            server.run()
        finally:
            # The handler threads (steward/api/app.py): a request still stuck on
            # an unreachable database must not hold the exit up.
            app.close()

    def stop(self, status):
        """Stop this process's service from another thread (never a signal
        handler): the main thread leaves wait_for_shutdown() or the HTTP server and
        shuts everything down in order; the command then returns ``status``."""
        self.status = status
        self._stop_requested.set()
        server = self._server
        if server is not None:
            server.should_exit = True

    def wait_for_shutdown(self):
        """Block until SIGTERM or SIGINT, or stop(). A second signal exits at
        once, for a stop that hangs on work in progress (a call stuck on an
        unreachable database)."""
        def handler(signum, _frame):
            if self._signal is not None:
                os._exit(1)
            self._signal = signum

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)
        while self._signal is None and not self._stop_requested.wait(0.2):
            pass
        if self._signal is not None:
            LOG.info('%s received: shutting down (a second one exits at once)',
                     signal.Signals(self._signal).name)


def fail(message, code=1):
    print(f'steward: {message}', file=sys.stderr)
    sys.exit(code)

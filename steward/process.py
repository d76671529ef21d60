"""One Steward process, whichever command it runs: configuration and logging, and
its ``Lifecycle`` (the HTTP server of the API; the signals: TERM and INT stop, HUP
reloads; a stop from another thread; the exit status), which the command's
composition root owns."""
import asyncio
import gc
import os
import signal
import sys
import threading
import warnings

from oslo_log import log as logging

from steward.conf import CONF
from steward import reload as config_reload

LOG = logging.getLogger(__name__)


def prepare(argv, default_config_files=None, default_config_dirs=None):
    """Parse configuration and set up logging. ``argv`` excludes the command."""
    warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')
    # oslo.log's options are registered once per process: CONF itself says whether
    # they are (its CLI options cannot be registered again once CONF was parsed).
    config_reload.prepare_log_options()
    if 'debug' not in CONF:
        logging.register_options(CONF)
    CONF(argv, project='steward', default_config_files=default_config_files,
         default_config_dirs=default_config_dirs)
    logging.setup(CONF, 'steward')
    os.makedirs(CONF.state_path, exist_ok=True)


def settle_heap():
    """Once a service has started: move everything built so far (modules, the
    configuration, the app, pools) out of the collector's sight. Python's full
    collections walk every tracked object, and a listing that builds tens of
    thousands of rows triggered several per request: most of a 10 000-device
    listing's time was spent walking start-up objects that never die."""
    gc.collect()
    gc.freeze()


def _server(config, lifecycle):
    """A uvicorn.Server that leaves SIGHUP to ``lifecycle`` (uvicorn handles TERM
    and INT only) and runs its reload off the event loop, and does not re-raise
    SIGTERM/SIGINT once it has shut down (uvicorn >= 0.29 does): the default
    handler would kill the process before the caller's orderly stop (agent, RPC
    servers, conductor, Placement) ran, and it would exit -15 instead of its
    status."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            super().handle_exit(sig, frame)
            getattr(self, '_captured_signals', []).clear()

        async def on_tick(self, counter):
            if lifecycle.reload_pending:
                await asyncio.to_thread(lifecycle.reload_if_signalled)
            return await super().on_tick(counter)

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
    """How this process's service runs and ends: TERM and INT stop it (a second one
    exits at once), HUP reloads it and never stops it, the status its command
    returns. Every service command goes through it: ``catch_reload()`` as soon as
    the configuration is read, then ``run_http()`` (serve, api in one process) or
    ``wait_for_shutdown()`` (conductor, agent); the gunicorn arbiter of api workers
    calls ``reload()`` from its own HUP (steward/supervisor.py).

    Signal handlers only assign plain attributes (taking a lock there can deadlock
    when a second signal interrupts the first handler); the work is done on the
    main thread, or off uvicorn's event loop in a thread of its own."""

    def __init__(self):
        self.status = 0
        self._server = None
        self._signal = None
        self.reload_pending = False
        self._reloaders = []
        self._stop_requested = threading.Event()

    # -- reload -------------------------------------------------------------------
    def on_reload(self, reloader):
        """``reloader(changed)`` runs after each reload, ``changed`` being {(group or
        None, option): (old, new)} of the mutable options whose value changed
        (empty when none did, or the files could not be read: the policy file is
        read again all the same)."""
        self._reloaders.append(reloader)

    def catch_reload(self):
        """From now on SIGHUP reloads (its default action would end the process,
        which systemd's Restart=on-failure counts as a clean exit)."""
        def handler(_signum, _frame):
            self.reload_pending = True

        signal.signal(signal.SIGHUP, handler)

    def reload_if_signalled(self):
        if self.reload_pending:
            self.reload_pending = False     # a HUP during the reload: once more
            self.reload()

    def reload(self):
        """Read the configuration files again (steward/reload.py), then let each
        part of the process act on it. A file that cannot be read or parsed keeps
        the configuration in force (one ERROR line); the policy file is read
        again all the same. Returns whether the configuration was reloaded."""
        changed = config_reload.reread()
        # The policy file is read again even when the configuration files could
        # not be: gunicorn's new api workers read it anyway, and every mode of
        # steward api must end up on the same rules.
        for reloader in self._reloaders:
            try:
                reloader(changed or {})
            except Exception:  # noqa: BLE001 - the others reload, the process serves
                LOG.exception('Reload step %s failed', getattr(
                    reloader, '__qualname__', reloader))
        if changed is None:
            return False
        files = list(CONF.config_file) + ([CONF.config_dir] if CONF.config_dir else [])
        names = sorted(f'[{group or "DEFAULT"}] {name}' for group, name in changed)
        LOG.info('Configuration reloaded from %s: %s', ', '.join(files) or 'no file',
                 ', '.join(names) or 'no option changed')
        return True

    # -- run and stop -------------------------------------------------------------
    def run_http(self, app, host, port):
        """Serve ``app`` in this process until SIGTERM/SIGINT or stop(); SIGHUP
        reloads."""
        import uvicorn
        LOG.info('Steward API listening on http://%s:%s/v2', host, port)
        server = _server(uvicorn.Config(app, host=host.strip('[]'), port=port,
                                        backlog=2048, **_HTTP_OPTIONS), self)
        self._server = server           # stop() ends it
        if self._stop_requested.is_set():
            return
        self.catch_reload()
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
        """Block until SIGTERM or SIGINT, or stop(), reloading on SIGHUP meanwhile.
        A second stop signal exits at once, for a stop that hangs on work in
        progress (a call stuck on an unreachable database)."""
        def handler(signum, _frame):
            if self._signal is not None:
                os._exit(1)
            self._signal = signum

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)
        self.catch_reload()
        while self._signal is None and not self._stop_requested.wait(0.2):
            self.reload_if_signalled()
        if self._signal is not None:
            LOG.info('%s received: shutting down (a second one exits at once)',
                     signal.Signals(self._signal).name)


def fail(message, code=1):
    print(f'steward: {message}', file=sys.stderr)
    sys.exit(code)

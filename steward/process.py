"""One Steward process, whichever command it runs: configuration and logging,
the database schema at start, the HTTP server of the API, and the stop (signals,
a stop from another thread, the exit status, the last clean-up)."""
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
_prepared = False


def prepare(argv, default_config_files=None):
    """Parse configuration and set up logging. ``argv`` excludes the command."""
    global _prepared
    warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')
    if not _prepared:
        logging.register_options(CONF)
        _prepared = True
    CONF(argv, project='steward', default_config_files=default_config_files)
    logging.setup(CONF, 'steward')
    for noisy in ('stevedore', 'oslo.messaging', 'oslo_messaging', 'kombu', 'amqp',
                  'keystoneauth', 'urllib3', 'alembic'):
        pylogging.getLogger(noisy).setLevel(pylogging.WARNING)
    os.makedirs(CONF.state_path, exist_ok=True)


def sync_database():
    from steward.db import migration
    if CONF.database.sync_on_startup:
        migration.upgrade()


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


_HTTP_OPTIONS = dict(log_level='warning', access_log=False, lifespan='off',
                     timeout_keep_alive=HTTP_KEEP_ALIVE)


def run_http(app, host, port):
    """Serve ``app`` in this process until SIGTERM/SIGINT or stop_process()."""
    import uvicorn
    LOG.info('Steward API listening on http://%s:%s/v2', host, port)
    server = _quiet_exit_server(uvicorn.Config(app, host=host.strip('[]'), port=port,
                                               backlog=2048, **_HTTP_OPTIONS))
    _exit['server'] = server            # stop_process() ends it
    if _stop_requested.is_set():
        return
    try:
        server.run()
    finally:
        # The handler threads (steward/api/app.py): a request still stuck on an
        # unreachable database must not hold the exit up.
        executor = getattr(getattr(app, 'state', None), 'executor', None)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


# How the process ends: the status its command returns, the HTTP server to stop, the
# signal received. Plain values: a signal handler only assigns (taking a lock there
# can deadlock when a second signal interrupts the first handler).
_exit = {'status': 0, 'server': None, 'signal': None}
_stop_requested = threading.Event()


def stop_process(status):
    """Stop this process's service from another thread (never a signal handler):
    the main thread leaves wait_for_shutdown() or the HTTP server and shuts
    everything down in order; the command then returns ``status``."""
    _exit['status'] = status
    _stop_requested.set()
    server = _exit['server']
    if server is not None:
        server.should_exit = True


def exit_status():
    return _exit['status']


def wait_for_shutdown():
    """Block until SIGTERM or SIGINT, or stop_process(). A second signal exits at
    once, for a stop that hangs on work in progress (a call stuck on an
    unreachable database)."""
    def handler(signum, _frame):
        if _exit['signal'] is not None:
            os._exit(1)
        _exit['signal'] = signum

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    while _exit['signal'] is None and not _stop_requested.wait(0.2):
        pass
    if _exit['signal'] is not None:
        LOG.info('%s received: shutting down (a second one exits at once)',
                 signal.Signals(_exit['signal']).name)


def release_shared_resources():
    """Last step of a service's shutdown: close the broker connections and the
    database pool so the other side sees a clean close, not a dead peer."""
    from steward.common import rpc
    from steward.db import session
    for step in (rpc.cleanup, session.dispose):
        try:
            step()
        except Exception:  # noqa: BLE001 - shutdown goes on
            LOG.exception('Shutdown step %s failed', step.__qualname__)


def fail(message, code=1):
    print(f'steward: {message}', file=sys.stderr)
    sys.exit(code)

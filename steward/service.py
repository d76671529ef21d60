"""Wiring shared by the steward commands: configuration, database, Placement,
RPC servers, the HTTP server, and what the separate services of a multi-host
deployment check and share (transport, RPC version caps, shutdown)."""
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


def placement_is_embedded():
    return CONF.placement.embedded and not (CONF.placement.auth_type
                                            or CONF.placement.endpoint_override)


def embedded_placement_url():
    return f'http://{CONF.placement.embedded_host}:{CONF.placement.embedded_port}'


def placement_client(endpoint=None):
    from steward.placement import client
    if endpoint is None and placement_is_embedded():
        endpoint = embedded_placement_url()
    return client.PlacementClient.from_conf(CONF, endpoint=endpoint)


def start_embedded_placement(wait=True):
    """The embedded Placement child; ``wait=False``: started, not yet answering
    (call its ``wait_ready()`` before using it)."""
    from steward.placement import handle
    log_file = os.path.join(CONF.state_path, 'placement.log')
    proc = handle.start_subprocess(CONF.placement.embedded_connection,
                                   CONF.placement.embedded_host,
                                   CONF.placement.embedded_port, log_file=log_file,
                                   wait=wait, workers=CONF.placement.embedded_workers)
    # One start-up line per component: handle.start_subprocess() logs the URL.
    LOG.debug('Embedded Placement (pid %s) at %s, log %s', proc.pid, proc.url, log_file)
    return proc


def settle_heap():
    """Once a service has started: move everything built so far (modules, the
    configuration, the app, pools) out of the collector's sight. Python's full
    collections walk every tracked object, and a listing that builds tens of
    thousands of rows triggered several per request: most of a 10 000-device
    listing's time was spent walking start-up objects that never die."""
    gc.collect()
    gc.freeze()


def start_rpc_server(topic, server, endpoints):
    from steward.common import rpc
    srv = rpc.get_server(topic, server, endpoints)
    srv.start()
    return srv


def stop_rpc_server(srv):
    try:
        srv.stop()
        srv.wait()
    except Exception:   # shutdown must go on whatever one server does
        LOG.exception('Stopping an RPC server failed')


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
    server.run()


# -- separate services (steward api | conductor | agent) ---------------------------
# Transports that only reach the same process: the separate services must share a
# broker instead.
IN_PROCESS_TRANSPORTS = ('kombu+stewardmem', 'kombu+memory', 'fake')


def check_service_config(role):
    """Refuse a configuration the separate service ``role`` cannot work with, at
    start and with the option to change, rather than time out on first use."""
    from steward.common import exception
    from steward.common import netutils
    url = CONF.transport_url or ''
    if url.split(':', 1)[0] in IN_PROCESS_TRANSPORTS:
        raise exception.InvalidConfiguration(
            reason=f'steward {role} runs as a separate service but [DEFAULT] '
                   f'transport_url = {netutils.redacted_url(url)} only reaches services in the same '
                   f'process; set it to the shared broker, e.g. '
                   f'rabbit://steward:PASSWORD@CONTROLLER:5672/')
    if role in ('api', 'conductor'):
        connection = CONF.database.connection or ''
        if connection.startswith('sqlite'):
            LOG.warning('steward %s uses SQLite (%s): every api and conductor process '
                        'must then run on this host; set [database] connection to '
                        'PostgreSQL for a multi-host control plane', role,
                        netutils.redacted_url(connection))
    rpc_version_cap('conductor')
    rpc_version_cap('agent')


def is_loopback(host):
    """True when every address ``host`` names is a loopback address (an address
    that does not resolve is not)."""
    import ipaddress
    import socket
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split('%')[0]).is_loopback
                               for a in found)


def check_exposure(listeners):
    """Refuse noauth on a routable address. ``listeners``: (what, host) of every
    socket this process serves without authentication when auth_strategy is
    noauth. With [api] allow_insecure_noauth the start goes on, with a WARNING."""
    from steward.common import exception
    if CONF.api.auth_strategy != 'noauth':
        return
    exposed = [f'{what} on {host}' for what, host in listeners if not is_loopback(host)]
    if not exposed:
        return
    if CONF.api.allow_insecure_noauth:
        LOG.warning('INSECURE: auth_strategy = noauth with %s: every caller who '
                    'reaches it is an admin ([api] allow_insecure_noauth = true). '
                    'Set [api] auth_strategy = keystone.', ', '.join(exposed))
        return
    raise exception.InvalidConfiguration(
        reason=f'[api] auth_strategy = noauth would make every caller an admin on '
               f'{", ".join(exposed)} (not loopback); set [api] auth_strategy = '
               f'keystone, or listen on 127.0.0.1, or set [api] '
               f'allow_insecure_noauth = true to accept that')


def _newest_rpc_version(service):
    if service == 'conductor':
        from steward.conductor import rpcapi
    else:
        from steward.agent import rpcapi
    return rpcapi.RPC_API_VERSION


def rpc_version_cap(service):
    """``[upgrade_levels] <service>`` checked against what this release speaks:
    None (send the newest) when unset."""
    from steward.common import exception
    value = (CONF.upgrade_levels[service] or '').strip()
    if not value:
        return None
    newest = _newest_rpc_version(service)
    major, newest_minor = (int(p) for p in newest.split('.'))
    try:
        want_major, want_minor = (int(p) for p in value.split('.'))
    except ValueError:
        want_major = want_minor = None
    if want_major != major or not 0 <= want_minor <= newest_minor:
        raise exception.InvalidConfiguration(
            reason=f'[upgrade_levels] {service} = {value!r}: expected a {service} RPC '
                   f'version from {major}.0 to {newest} (MAJOR.MINOR), or unset for '
                   f'the newest')
    return f'{want_major}.{want_minor}'


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

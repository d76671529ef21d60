"""oslo.messaging plumbing: one transport per process, context-carrying serializer,
and the bound on how long a caller waits for an unreachable broker."""
import logging
import threading

from oslo_config import cfg
import oslo_messaging as messaging

from steward.common import context as steward_context
from steward.common import memory_transport
from steward.conf import CONF

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_transport = None
_url = None
_reply_setup = None     # the thread opening this process's reply queue, once

ALLOWED_EXMODS = ['steward.common.exception']


class ContextSerializer(messaging.NoOpSerializer):
    def serialize_context(self, ctxt):
        return ctxt.to_dict()

    def deserialize_context(self, ctxt):
        ctx = steward_context.RequestContext.from_dict(ctxt)
        # Only an RPC server deserializes: endpoints learn they were called over
        # the bus (see dispatched()).
        ctx.steward_dispatched = True
        return ctx


def dispatched(ctx):
    """True when ``ctx`` came with an RPC call (an endpoint called directly, as
    the single-host API calls its conductor, gets the caller's own context)."""
    return getattr(ctx, 'steward_dispatched', False)


def get_transport():
    global _transport, _url
    memory_transport.register()
    with _lock:
        if _transport is None or _url != CONF.transport_url:
            _transport = messaging.get_rpc_transport(
                CONF, allowed_remote_exmods=ALLOWED_EXMODS)
            if CONF.transport_url.startswith(f'kombu+{memory_transport.ALIAS}'):
                # Nothing to heartbeat in-process (and kombu warns it cannot).
                CONF.set_default('heartbeat_timeout_threshold', 0,
                                 group='oslo_messaging_rabbit')
            _url = CONF.transport_url
        return _transport


def cleanup():
    global _transport, _url, _reply_setup
    with _lock:
        if _transport is not None:
            _transport.cleanup()
        _transport = _url = _reply_setup = None


def _rabbit_opt(name, default):
    try:
        return getattr(CONF.oslo_messaging_rabbit, name)
    except (AttributeError, cfg.NoSuchOptError):
        return default


def retries_within(seconds):
    """The ``retry`` (reconnection attempts) of a call that must give up on an
    unreachable broker after about ``seconds``. The rabbit driver sleeps
    kombu_reconnect_delay plus kombu's interval (rabbit_retry_interval, growing by
    rabbit_retry_backoff up to rabbit_interval_max) before each new attempt; with
    a bounded ``retry`` it raises MessageDeliveryFailure and drops the message, so
    nothing is sent after the caller was told the call failed."""
    delay = _rabbit_opt('kombu_reconnect_delay', 1.0)
    start = _rabbit_opt('rabbit_retry_interval', 1)
    step = _rabbit_opt('rabbit_retry_backoff', 2)
    cap = _rabbit_opt('rabbit_interval_max', 30)
    retries, spent = 0, 0.0
    while retries < 1000:
        wait = delay + min(start + retries * step, cap)
        if wait <= 0 or spent + wait > seconds:
            break
        spent += wait
        retries += 1
    return retries


def reply_queue_ready(timeout):
    """True once this process can receive RPC replies (False after ``timeout``).

    The driver opens its reply queue on the first call, on a connection that
    retries forever: a first call while the broker is down would hang however
    small its ``retry``. That opening runs here in a thread of its own instead;
    the caller gives up after ``timeout`` having sent nothing, and the thread
    finishes once the broker is back."""
    global _reply_setup
    driver = getattr(get_transport(), '_driver', None)
    if getattr(driver, '_reply_q', 'n/a') is not None:
        return True         # opened already, or a driver without reply queues
    with _lock:
        setup = _reply_setup
        if setup is None or (not setup.is_alive() and not setup.done.is_set()):
            setup = _reply_setup = threading.Thread(
                target=_open_reply_queue, args=(driver,), daemon=True,
                name='steward-rpc-reply-queue')
            setup.done = threading.Event()
            setup.start()
    return setup.done.wait(timeout)


def _open_reply_queue(driver):
    me = threading.current_thread()
    try:
        driver._get_reply_q()
        me.done.set()
    except Exception as err:  # noqa: BLE001 - the next call starts a new attempt
        LOG.warning('Could not open the RPC reply queue: %s', err)


def get_client(topic, version, version_cap=None, server=None):
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(get_transport(), target, version_cap=version_cap,
                                    serializer=ContextSerializer())


def get_server(topic, server, endpoints):
    target = messaging.Target(topic=topic, server=server)
    return messaging.get_rpc_server(get_transport(), target, endpoints,
                                    executor='threading',
                                    serializer=ContextSerializer())


def start_server(topic, server, endpoints):
    srv = get_server(topic, server, endpoints)
    srv.start()
    return srv


def stop_server(srv):
    try:
        srv.stop()
        srv.wait()
    except Exception:   # shutdown must go on whatever one server does
        LOG.exception('Stopping an RPC server failed')

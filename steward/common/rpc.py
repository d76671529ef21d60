"""oslo.messaging plumbing: the transport a command's composition root builds once
(``Transport``; the RPC clients and servers are built from it), the
context-carrying serializer, and the bound on how long a caller waits for an
unreachable broker."""
import logging
import threading

from oslo_config import cfg
import oslo_messaging as messaging

from steward.common import context as steward_context
from steward.common import memory_transport
from steward.conf import CONF

LOG = logging.getLogger(__name__)

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


class Transport:
    """The oslo.messaging RPC transport of one process ([DEFAULT] transport_url, as
    configured when it is built): clients (``client``) and servers (``server``,
    ``start_server``) are made from it; ``cleanup()`` closes its connections."""

    def __init__(self, conf=None):
        conf = CONF if conf is None else conf
        memory_transport.register()
        self.url = conf.transport_url
        self._transport = messaging.get_rpc_transport(
            conf, allowed_remote_exmods=ALLOWED_EXMODS)
        if (self.url or '').startswith(f'kombu+{memory_transport.ALIAS}'):
            # Nothing to heartbeat in-process (and kombu warns it cannot).
            conf.set_default('heartbeat_timeout_threshold', 0,
                             group='oslo_messaging_rabbit')
        self._lock = threading.Lock()
        self._reply_setup = None    # the thread opening the reply queue, once

    def client(self, topic, version, version_cap=None, server=None):
        target = messaging.Target(topic=topic, version=version, server=server)
        return messaging.get_rpc_client(self._transport, target, version_cap=version_cap,
                                        serializer=ContextSerializer())

    def server(self, topic, server, endpoints):
        target = messaging.Target(topic=topic, server=server)
        return messaging.get_rpc_server(self._transport, target, endpoints,
                                        executor='threading',
                                        serializer=ContextSerializer())

    def start_server(self, topic, server, endpoints):
        srv = self.server(topic, server, endpoints)
        srv.start()
        return srv

    def reply_queue_ready(self, timeout):
        """True once this transport can receive RPC replies (False after
        ``timeout``).

        The driver opens its reply queue on the first call, on a connection that
        retries forever: a first call while the broker is down would hang however
        small its ``retry``. That opening runs here in a thread of its own instead;
        the caller gives up after ``timeout`` having sent nothing, and the thread
        finishes once the broker is back."""
        driver = getattr(self._transport, '_driver', None)
        if getattr(driver, '_reply_q', 'n/a') is not None:
            return True         # opened already, or a driver without reply queues
        with self._lock:
            setup = self._reply_setup
            if setup is None or (not setup.is_alive() and not setup.done.is_set()):
                setup = self._reply_setup = threading.Thread(
                    target=_open_reply_queue, args=(driver,), daemon=True,
                    name='steward-rpc-reply-queue')
                setup.done = threading.Event()
                setup.start()
        return setup.done.wait(timeout)

    def cleanup(self):
        setup = self._reply_setup
        if setup is not None and setup.is_alive() and not setup.done.is_set():
            # Still opening the reply queue on a broker that does not answer: the
            # driver's cleanup would wait for that thread (it holds the reply
            # queue's lock) for ever, and a SIGTERM would never end the process.
            # Nothing is connected to close.
            LOG.warning('Message broker never reached; leaving without closing '
                        'its connections')
            return
        self._transport.cleanup()


def _open_reply_queue(driver):
    me = threading.current_thread()
    try:
        driver._get_reply_q()
        me.done.set()
    except Exception as err:  # noqa: BLE001 - the next call starts a new attempt
        LOG.warning('Could not open the RPC reply queue: %s', err)


def stop_server(srv):
    """Stop ``srv`` taking calls, let the ones it took finish, close it. Its
    consumers are cancelled at the broker first (``_leave_queues``), so that the
    calls sent meanwhile go to the topic's other servers instead of being lost."""
    try:
        _leave_queues(srv)
        srv.stop()
        srv.wait()
    except Exception:   # shutdown must go on whatever one server does
        LOG.exception('Stopping an RPC server failed')


def _leave_queues(srv):
    """Have the consumers of ``srv``'s listener cancelled at the broker by its poll
    loop, before the listener is shut off.

    oslo.messaging's ``stop()`` only ends the poll loop: the broker goes on
    delivering the topic's calls to the consumer, and the connection's heartbeat
    thread, which drains the socket, hands each delivery to the listener, which
    acknowledges it at once (RpcAMQPListener) and queues it for a poll loop that
    no longer runs. Each such call is lost and its caller waits for its
    ``rpc_response_timeout``: a conductor stopped during a rolling upgrade lost
    the call in flight of every busy caller.

    The cancel is queued on the listener's operations handler, which the poll
    loop runs between two reads and once more when ``stop()`` has ended it, before
    the listener is shut off; it runs in the loop's thread under the connection's
    lock, as every use of the connection does (a lock taken from here starved
    behind a busy loop, which takes it again as soon as it lets it go). It is not
    waited for: an idle loop reads for up to 5 s before it runs the handler, and
    ``stop()`` ends that read no sooner. Deliveries acknowledged before the cancel
    are in the listener's queue, which the server runs to its end after
    ``stop()``; one on its way when the broker took the cancel finds no consumer
    left and is rejected back to the queue (py-amqp requeues a delivery without a
    callback), for another server. Not waiting for the broker's answer keeps a
    broker that does not answer from holding the stop. Other transports (the
    in-process one) have no heartbeat thread and are left to ``stop()``."""
    listener = getattr(getattr(srv, 'listener', None), '_poll_style_listener', None)
    operations = getattr(listener, '_message_operations_handler', None)
    # The listener's pooled connection context wraps the driver's connection,
    # which wraps kombu's.
    conn = getattr(getattr(listener, 'conn', None), 'connection', None)
    transport = getattr(getattr(conn, 'connection', None), 'transport', None)
    if operations is None or getattr(transport, 'driver_type', None) != 'amqp':
        return

    def cancel():
        try:
            with conn._connection_lock:
                _cancel_consumers(conn)
        except Exception as err:  # noqa: BLE001 - the broker gone: nothing to cancel
            LOG.warning('Could not cancel the RPC consumers at the broker: %s', err)

    operations.do(cancel)


def _cancel_consumers(conn):
    """basic.cancel of every consumer of ``conn`` without waiting for the answer,
    its callback removed, so that a delivery still on its way is requeued. The
    topic's consumers are forgotten, so that a reconnection does not consume from
    their queues again; a fanout consumer is kept, for the driver's close to
    delete its queue (a name of its own: nobody else would)."""
    for consumer, tag in list(conn._consumers.items()):
        if consumer.type != 'fanout':
            del conn._consumers[consumer]
            conn._new_tags.discard(tag)
        channel = consumer.queue.channel
        channel.callbacks.pop(str(tag), None)
        channel.basic_cancel(str(tag), nowait=True)

"""oslo.messaging plumbing: one transport per process, context-carrying serializer."""
import threading

import oslo_messaging as messaging

from steward.common import context as steward_context
from steward.common import memory_transport
from steward.conf import CONF

_lock = threading.Lock()
_transport = None
_url = None

ALLOWED_EXMODS = ['steward.common.exception']


class ContextSerializer(messaging.NoOpSerializer):
    def serialize_context(self, ctxt):
        return ctxt.to_dict()

    def deserialize_context(self, ctxt):
        return steward_context.RequestContext.from_dict(ctxt)


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
    global _transport, _url
    with _lock:
        if _transport is not None:
            _transport.cleanup()
        _transport = _url = None


def get_client(topic, version, version_cap=None, server=None):
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(get_transport(), target, version_cap=version_cap,
                                    serializer=ContextSerializer())


def get_server(topic, server, endpoints):
    target = messaging.Target(topic=topic, server=server)
    return messaging.get_rpc_server(get_transport(), target, endpoints,
                                    executor='threading',
                                    serializer=ContextSerializer())

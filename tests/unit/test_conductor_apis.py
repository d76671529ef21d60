"""How a caller reaches the conductor and the ARQ operations says whether a call
crosses the broker (issue 54): ConductorAPI sends RPC and nothing else,
LocalConductorAPI calls the ConductorManager of its process with the same
methods; the ARQ operations have one interface (steward/arqs/api.py) and two
implementations, LocalArqAPI (the ARQService of this process) and ArqRPCAPI
(the conductors over RPC, a caller's wait bounded: 503)."""
import inspect

import pytest

from steward.arqs import api as arq_api
from steward.common import exception
from steward.conductor import local_api
from steward.conductor import rpcapi


class FakeClient:
    """An oslo.messaging RPC client that records what it is asked to send."""

    def __init__(self, sent, prepared=None):
        self.sent = sent
        self.prepared = prepared or {}

    def can_send_version(self, version):
        return True

    def prepare(self, **kwargs):
        return FakeClient(self.sent, {**self.prepared, **kwargs})

    def call(self, ctx, method, **kwargs):
        self.sent.append(('call', method, self.prepared, kwargs))
        return f'{method} answered'

    def cast(self, ctx, method, **kwargs):
        self.sent.append(('cast', method, self.prepared, kwargs))


class FakeTransport:
    def __init__(self, broker_up=True):
        self.sent = []
        self.broker_up = broker_up

    def client(self, topic, version, version_cap=None, server=None):
        return FakeClient(self.sent)

    def reply_queue_ready(self, timeout):
        return self.broker_up


def _public(cls):
    return {name for name, value in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith('_')}


def test_conductor_api_takes_a_transport_and_nothing_else():
    params = inspect.signature(rpcapi.ConductorAPI).parameters
    assert list(params) == ['transport', 'version_cap']
    assert all(p.kind is p.KEYWORD_ONLY for p in params.values())
    with pytest.raises(TypeError):
        rpcapi.ConductorAPI(object())       # a manager: that is LocalConductorAPI's
    source = inspect.getsource(rpcapi)
    for gone in ('run_arqs_here', 'arqs_here', '_arqs', '_manager'):
        assert gone not in source, gone


def test_the_local_and_the_rpc_conductor_api_have_the_same_methods():
    assert _public(rpcapi.ConductorAPI) == _public(local_api.LocalConductorAPI)
    for name in _public(rpcapi.ConductorAPI):
        assert inspect.signature(getattr(rpcapi.ConductorAPI, name)) == \
            inspect.signature(getattr(local_api.LocalConductorAPI, name)), name


def test_conductor_api_sends_every_call_over_rpc(conf):
    transport = FakeTransport()
    api = rpcapi.ConductorAPI(transport=transport)
    assert api.arq_bind(None, [{'uuid': 'u'}]) == 'arq_bind answered'
    assert api.device_clean(None, 'd') == 'device_clean answered'
    (kind, method, prepared, kwargs), (_, clean, clean_prepared, _) = transport.sent
    assert (kind, method, kwargs) == ('call', 'arq_bind', {'bindings': [{'uuid': 'u'}]})
    # A caller waits on the bind: its own timeout, a bounded retry.
    assert prepared['timeout'] == conf.rpc_response_timeout_bind
    assert 'retry' in prepared
    assert (clean, clean_prepared['version']) == ('device_clean', '1.1')


def test_a_caller_does_not_wait_for_an_unreachable_broker(conf):
    transport = FakeTransport(broker_up=False)
    arqs = arq_api.ArqRPCAPI(rpcapi.ConductorAPI(transport=transport))
    with pytest.raises(exception.ServiceUnavailable):
        arqs.arq_create(None, 'dp1', 'project')
    assert transport.sent == []


class Manager:
    """The methods of a ConductorManager the tests call, recorded."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def method(ctx, *args, **kwargs):
            self.calls.append((name, args, kwargs))
            return name
        return method


def test_local_conductor_api_calls_the_manager_of_this_process():
    manager = Manager()
    api = local_api.LocalConductorAPI(manager)
    assert api.can_send_version('1.4') and not api.can_cast_quiet()
    assert api.arq_delete(None, instance_uuid='i') == 'arq_delete'
    assert api.device_cleanup_start(None, 'd', 'h', 'unbind') == 'device_cleanup_start'
    api.device_release_for_cleaning(None, 'd')
    assert manager.calls == [
        ('arq_delete', (), {'arq_uuids': None, 'instance_uuid': 'i', 'project_id': None}),
        ('device_cleanup_start', (), {'device_uuid': 'd', 'host': 'h',
                                      'trigger': 'unbind'}),
        ('device_release_for_cleaning', ('d',), {})]


def test_one_arq_interface_two_implementations_that_say_what_they_are():
    ops = {'arq_create', 'arq_bind', 'arq_unbind', 'arq_delete'}
    assert arq_api.ArqAPI.__abstractmethods__ == ops
    with pytest.raises(TypeError):
        arq_api.ArqAPI()
    service = Manager()
    local = arq_api.LocalArqAPI(service)
    remote = arq_api.ArqRPCAPI(rpcapi.ConductorAPI(transport=FakeTransport()))
    assert isinstance(local, arq_api.ArqAPI) and isinstance(remote, arq_api.ArqAPI)
    assert local.local and not remote.local
    for name in ops:
        assert inspect.signature(getattr(arq_api.LocalArqAPI, name)) == \
            inspect.signature(getattr(arq_api.ArqAPI, name)) == \
            inspect.signature(getattr(arq_api.ArqRPCAPI, name)), name
    local.arq_create(None, 'dp1', 'p')
    local.arq_unbind(None, ['u'])
    assert service.calls == [
        ('arq_create', (), {'device_profile_name': 'dp1', 'project_id': 'p'}),
        ('arq_unbind', (), {'arq_uuids': ['u']})]


def test_the_rpc_implementation_sends_the_arq_methods_of_rpc_1_0(conf):
    transport = FakeTransport()
    remote = arq_api.ArqRPCAPI(rpcapi.ConductorAPI(transport=transport))
    remote.arq_create(None, 'dp1', 'p')
    remote.arq_bind(None, [])
    remote.arq_unbind(None, ['u'])
    remote.arq_delete(None, arq_uuids=['u'], project_id='p')
    assert [(kind, method, kwargs) for kind, method, _, kwargs in transport.sent] == [
        ('call', 'arq_create', {'device_profile_name': 'dp1', 'project_id': 'p'}),
        ('call', 'arq_bind', {'bindings': []}),
        ('call', 'arq_unbind', {'arq_uuids': ['u']}),
        ('call', 'arq_delete', {'arq_uuids': ['u'], 'instance_uuid': None,
                                'project_id': 'p'})]

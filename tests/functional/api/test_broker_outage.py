"""Outages under the API answer 503 cyb.service.unavailable with a clean body,
never 500, and log no traceback.

* A real RabbitMQ stopped under an API that reaches its conductor over it:
  whichever layer of oslo.messaging notices (the reply queue, the connection pool
  opening a new connection, a pooled connection found dead). The cheapest real
  setup: one throw-away broker (tests/multihost/rabbit.py), the in-process app on
  its Transport, the real conductor serving on that broker while it is up. The
  multi-host deployment's own test (tests/multihost/test_broker_outage.py) checks
  the same promise with every service apart.
* A real PostgreSQL whose connection pool is exhausted.
"""
import concurrent.futures
import logging

import pytest
from starlette import testclient

from steward.common import context
from steward.common import rpc
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.conductor.rpcapi import ConductorAPI
from steward.conf import CONF
from tests.fixtures import roots
from tests.fixtures import stack
from tests.functional import conductor_fixtures as cf
from tests.functional.api.conftest import make_profile
from tests.multihost import rabbit

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('rabbit')]


@pytest.fixture
def broker(conf):
    rabbit.require()
    server = rabbit.RabbitServer().start()
    # Few, short reconnection attempts: the bound below is rpc_unavailable_timeout.
    conf.set_override('transport_url', server.url())
    conf.set_override('rpc_unavailable_timeout', 3.0)
    yield server
    server.destroy()
    # oslo.messaging's option, not one the conf fixture resets: the test sets it.
    CONF.clear_override('rpc_response_timeout')


@pytest.fixture
def remote_api(broker, database, seed):
    """(API client, the API's Transport, the conductor manager): the API and a
    conductor apart, over the real broker."""
    conductor_side = rpc.Transport()
    manager = ConductorManager(cf.deps(database, conductor_side))
    manager.init_host()
    server = conductor_side.start_server(CONF.rpc_topic_conductor, 'conductor-1',
                                         [manager])
    api_side = rpc.Transport()
    app = roots.api_app(ConductorAPI(transport=api_side), database)
    with testclient.TestClient(app, raise_server_exceptions=False) as client:
        yield client, api_side, manager
    server.stop()
    server.wait()
    manager.stop()
    api_side.cleanup()
    conductor_side.cleanup()


def _unavailable(r):
    assert r.status_code == 503, r.text
    body = r.json()
    assert body['error_code'] == 'cyb.service.unavailable', body
    assert set(body) == {'error_message', 'faultstring', 'error_code', 'request_id'}
    assert 'Traceback' not in r.text


def _create(client):
    return client.post('/v2/accelerator_requests', json={'device_profile_name': 'dp1'})


def _delete(client, arq):
    return client.delete('/v2/accelerator_requests', params={'arqs': arq})


def test_arq_create_and_delete_answer_503_while_the_broker_is_down(
        broker, remote_api, caplog):
    client, api_transport, manager = remote_api
    make_profile(client)
    ctx = context.get_admin_context()
    kept = manager.arq_create(ctx, 'dp1', None)[0]['uuid']
    # The API has its reply queue but no connection in its send pool yet (as
    # when more calls come at once than it has pooled connections): the call has
    # to open one, and kombu's OperationalError comes out of oslo.messaging's
    # connection pool.
    assert api_transport.reply_queue_ready(60)

    broker.stop()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _unavailable(_create(client))
        _unavailable(_delete(client, kept))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: (_create if i % 2 else _delete)(
                client, *([] if i % 2 else [kept])), range(4)))
        for r in answers:
            _unavailable(r)
    logged = [r for r in caplog.records if r.name.startswith('steward.api')]
    assert not [r for r in logged if r.exc_info], [r.getMessage() for r in logged]
    assert not [r for r in logged if 'cyb.internal' in r.getMessage()]
    # Nothing was done behind the callers' backs.
    listed = client.get('/v2/accelerator_requests').json()['arqs']
    assert [a['uuid'] for a in listed] == [kept]

    # After the restart, the first call on a connection pooled before it can be
    # lost (classic queues: bench/recovery.py) and answers 503 only when its reply
    # times out; the wait below retries until a delete goes through, so a short
    # timeout (retried, never asserted on) ends that wait sooner than the default 60 s.
    CONF.set_override('rpc_response_timeout', 5)
    broker.start()
    # Back by itself: the same API and conductor, nothing restarted.
    stack.wait_for(lambda: _delete(client, kept).status_code == 204,
                   'a delete going through again', timeout=120)
    assert client.get('/v2/accelerator_requests').json()['arqs'] == []


@pytest.mark.parametrize('db', ['postgresql'], indirect=True)
def test_an_exhausted_database_pool_answers_503(db, conf, transport, caplog):
    """Every pooled connection busy for [database] pool_timeout (a real
    PostgreSQL, a pool of one held by someone else): 503, not 500."""
    from steward.db import session
    conf.set_override('max_pool_size', 1, group='database')
    conf.set_override('max_overflow', 0, group='database')
    conf.set_override('pool_timeout', 1, group='database')
    database = session.Database(db)
    manager = ConductorManager(cf.deps(database, transport))
    app = roots.api_app(LocalConductorAPI(manager), database)
    try:
        with testclient.TestClient(app, raise_server_exceptions=False) as client:
            assert client.get('/v2/device_profiles').status_code == 200
            with database.engine.connect():         # the pool's only connection
                with caplog.at_level(logging.INFO):
                    _unavailable(client.get('/v2/device_profiles'))
                    _unavailable(client.post('/v2/accelerator_requests',
                                             json={'device_profile_name': 'x'}))
            assert not [r for r in caplog.records if r.exc_info]
            assert client.get('/v2/device_profiles').status_code == 200
    finally:
        manager.stop()
        database.dispose()

"""Failures of the services behind the API are clean 503s (or 409 for a capped
RPC version), never a 500 with a traceback."""
import oslo_messaging
import pytest
import sqlalchemy.exc
from oslo_messaging.rpc import client as rpc_client

from steward.arqs import api as arq_api
from steward.conductor.local_api import LocalConductorAPI
from starlette import testclient
from tests.fixtures import roots


class Failing:
    """A conductor whose transport fails the way the real ones do."""

    def __init__(self, exc):
        self.exc = exc

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.exc
        return call


@pytest.mark.parametrize('exc,status,code', [
    (oslo_messaging.MessagingTimeout('timed out'), 503, 'cyb.service.unavailable'),
    (sqlalchemy.exc.OperationalError('SELECT 1', {}, Exception('server closed the connection')),
     503, 'cyb.service.unavailable'),
    (oslo_messaging.RemoteError('OperationalError', 'gone', ''), 503,
     'cyb.service.unavailable'),
    (rpc_client.RPCVersionCapError(version='1.1', version_cap='1.0'), 409,
     'cyb.rpc.version_capped'),
])
def test_outage_answers(database, seed, exc, status, code):
    # The ARQ operations sent to conductors whose transport fails.
    app = roots.api_app(LocalConductorAPI(Failing(exc)), database,
                        arqs=arq_api.ArqRPCAPI(Failing(exc)))
    with testclient.TestClient(app, raise_server_exceptions=False) as client:
        r = client.post('/v2/accelerator_requests', json={'device_profile_name': 'x'})
    assert r.status_code == status
    body = r.json()
    assert body['error_code'] == code
    assert 'Traceback' not in r.text

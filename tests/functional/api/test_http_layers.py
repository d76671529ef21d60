"""The layers in front of the API, in-process, for what the real-server tests
(tests/functional/test_hosted_api.py) do not vary: /healthcheck's detailed and
restricted forms, and no CORS layer without an allowed origin."""
import pytest
from starlette import testclient

from steward.conductor.local_api import LocalConductorAPI
from steward.conf import CONF
from tests.fixtures import roots


@pytest.fixture
def make_client(manager, seed, conf):
    clients = []

    def make(overrides=None):
        for (group, name), value in (overrides or {}).items():
            CONF.set_override(name, value, group=group)
        client = testclient.TestClient(
            roots.api_app(LocalConductorAPI(manager), manager.database),
            raise_server_exceptions=False)
        clients.append(client)
        return client
    yield make
    for client in clients:
        client.app.close()


def test_healthcheck_detailed(make_client):
    c = make_client({('healthcheck', 'detailed'): True})
    doc = c.get('/healthcheck', headers={'Accept': 'application/json'}).json()
    assert doc['detailed'] is True
    assert doc['reasons'] == [{'class': 'HealthcheckResult', 'reason': 'OK',
                               'details': 'database: SELECT 1 answered'}]
    assert {'python_version', 'now', 'platform', 'gc', 'threads'} <= set(doc)
    r = c.get('/healthcheck', headers={'Accept': 'text/html;q=0.9, text/plain;q=0.1'})
    assert 'Server status' in r.text and 'SELECT 1 answered' in r.text
    # Nothing acceptable offered: text/plain, never a 406.
    r = c.get('/healthcheck', headers={'Accept': 'image/png'})
    assert (r.status_code, r.text) == (200, 'OK')


def test_healthcheck_outside_allowed_source_ranges_is_not_there(make_client):
    c = make_client({('healthcheck', 'allowed_source_ranges'): ['192.0.2.0/24']})
    r = c.get('/healthcheck')
    assert r.status_code == 404
    assert r.json()['error_code'] == 'cyb.request.path_not_found'


def test_healthcheck_ignores_proxied_requests_when_told(make_client):
    c = make_client({('healthcheck', 'ignore_proxied_requests'): True})
    assert c.get('/healthcheck').status_code == 200
    assert c.get('/healthcheck', headers={'X-Forwarded-For': '203.0.113.1'}
                 ).status_code == 404


def test_no_cors_layer_without_an_allowed_origin(make_client):
    c = make_client()
    r = c.options('/v2/devices', headers={'Origin': 'https://a.example',
                                          'Access-Control-Request-Method': 'GET'})
    assert r.status_code == 405
    assert 'access-control-allow-origin' not in r.headers
    r = c.get('/v2/devices', headers={'Origin': 'https://a.example'})
    assert 'access-control-allow-origin' not in r.headers


def test_cors_any_origin(make_client):
    c = make_client({('cors', 'allowed_origin'): ['*']})
    r = c.get('/v2/devices', headers={'Origin': 'https://a.example'})
    assert r.headers['access-control-allow-origin'] == '*'


def test_body_limit_option(make_client):
    c = make_client({('oslo_middleware', 'max_request_body_size'): 64})
    r = c.post('/v2/device_profiles', content=b'[' + b' ' * 100 + b']')
    assert r.status_code == 413
    assert r.json()['error_code'] == 'cyb.request.too_large'


def test_noauth_refuses_a_routable_listener(make_client):
    """What a hosting server bound to a routable address passes as the scope's
    ``server``: every caller would be an admin, so nothing is served."""
    c = make_client()
    c.base_url = 'http://192.0.2.9:6666'
    r = c.get('/v2/devices')
    assert r.status_code == 403
    assert r.json()['error_code'] == 'cyb.auth.noauth_not_loopback'
    assert '192.0.2.9' in r.json()['error_message']
    assert c.get('/v2').status_code == 403
    assert c.get('/healthcheck').status_code == 200     # the balancer's check
    c.base_url = 'http://127.0.0.1:6666'
    assert c.get('/v2/devices').status_code == 200


def test_noauth_on_a_routable_listener_when_allowed(make_client):
    c = make_client({('api', 'allow_insecure_noauth'): True})
    c.base_url = 'http://192.0.2.9:6666'
    assert c.get('/v2/devices').status_code == 200

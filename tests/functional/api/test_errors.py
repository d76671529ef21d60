"""The error contract: one JSON document, no HTML, no traceback, no framework shapes."""
import logging
import uuid

import pytest
from starlette import testclient

from steward.arqs import api as arq_api
from steward.common import exception
from steward.conductor.local_api import LocalConductorAPI
from tests.fixtures import roots
from tests.functional.api.conftest import make_profile
from tests.functional.api.conftest import snapshot

ERROR_KEYS = {'error_message', 'faultstring', 'error_code', 'request_id'}


class ExplodingManager:
    """A conductor (and an ARQ service) whose every call fails unexpectedly."""

    def __getattr__(self, name):
        def boom(ctx, **kwargs):
            raise RuntimeError('secret detail at /srv/steward/conductor.py line 42')
        return boom


@pytest.fixture
def exploding_client(database, seed):
    app = roots.api_app(LocalConductorAPI(ExplodingManager()), database,
                        arqs=arq_api.LocalArqAPI(ExplodingManager()))
    with testclient.TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_unexpected_error_is_a_clean_500(exploding_client, caplog):
    make_profile(exploding_client, 'dp1')
    with caplog.at_level(logging.ERROR, logger='steward.api.errors'):
        r = exploding_client.post('/v2/accelerator_requests',
                                  json={'device_profile_name': 'dp1'})
    assert r.status_code == 500
    assert r.headers['content-type'] == 'application/json'
    body = r.json()
    assert set(body) == ERROR_KEYS
    assert body['error_message'] == 'An unexpected error occurred.'
    assert body['error_code'] == 'cyb.internal'
    assert 'secret' not in r.text and 'Traceback' not in r.text
    assert r.headers['openstack-api-version'] == 'accelerator 2.0'
    request_id = r.headers['x-openstack-request-id']
    assert body['request_id'] == request_id
    # ...but the log has the traceback and the request id.
    record = next(rec for rec in caplog.records if request_id in rec.getMessage())
    assert record.exc_info and 'secret detail' in str(record.exc_info[1])


def test_steward_errors_from_the_conductor_keep_their_status(database, db, seed):
    class Manager:
        def arq_create(self, ctx, **kwargs):
            raise exception.ServiceUnavailable(service='Placement', reason='down')

    app = roots.api_app(LocalConductorAPI(Manager()), database,
                        arqs=arq_api.LocalArqAPI(Manager()))
    with testclient.TestClient(app, raise_server_exceptions=False) as c:
        make_profile(c, 'dp1')
        r = c.post('/v2/accelerator_requests', json={'device_profile_name': 'dp1'})
    assert r.status_code == 503
    assert r.json()['error_code'] == 'cyb.service.unavailable'
    assert r.json()['error_message'] == 'Placement is unavailable: down'


@pytest.mark.parametrize('method,path,status,code', [
    ('GET', '/v2/no/such/thing', 404, 'cyb.request.path_not_found'),
    ('GET', '/nothing', 404, 'cyb.request.path_not_found'),
    ('DELETE', '/v2/devices', 405, 'cyb.request.method_not_allowed'),
    ('PUT', '/v2/accelerator_requests', 405, 'cyb.request.method_not_allowed'),
    ('POST', '/', 405, 'cyb.request.method_not_allowed'),
])
def test_framework_errors_are_ours(client, method, path, status, code):
    r = client.request(method, path)
    assert r.status_code == status
    assert r.headers['content-type'] == 'application/json'
    assert set(r.json()) == ERROR_KEYS
    assert r.json()['error_code'] == code
    assert 'html' not in r.text.lower()


def test_405_lists_allowed_methods(client):
    r = client.put('/v2/accelerator_requests')
    assert set(r.headers['allow'].split(', ')) == {'GET', 'POST', 'PATCH', 'DELETE'}


def test_malformed_json_everywhere(client, seed):
    arq_url = f'/v2/accelerator_requests/{uuid.uuid4()}'
    for method, path in (('POST', '/v2/device_profiles'),
                         ('POST', '/v2/accelerator_requests'),
                         ('PATCH', '/v2/accelerator_requests'), ('PATCH', arq_url),
                         ('POST', '/v2/attributes'),
                         ('PATCH', f'/v2/deployables/{seed["deployable"]}/program')):
        r = client.request(method, path, content=b'{"a": ',
                           headers={'Content-Type': 'application/json'})
        assert r.status_code == 400, (method, path, r.text)
        assert r.json() == {
            'error_message': 'Request is not in valid JSON format.',
            'faultstring': 'Request is not in valid JSON format.',
            'error_code': 'cyb.request.malformed_json',
            'request_id': r.headers['x-openstack-request-id']}


def _body_routes(seed):
    arq_url = f'/v2/accelerator_requests/{uuid.uuid4()}'
    return (('POST', '/v2/device_profiles'), ('POST', '/v2/accelerator_requests'),
            ('PATCH', '/v2/accelerator_requests'), ('PATCH', arq_url),
            ('POST', '/v2/attributes'),
            ('PATCH', f'/v2/deployables/{seed["deployable"]}/program'))


ADVERSARIAL_BODIES = [
    # Deep enough to overflow the decoder, and deep but decodable.
    (b'[' * 50000 + b']' * 50000, 'cyb.request.too_deep'),
    (b'{"a":' * 5000 + b'1' + b'}' * 5000, 'cyb.request.too_deep'),
    (b'{"device_profile_name": ' + b'[' * 33 + b']' * 33 + b'}', 'cyb.request.too_deep'),
    (b'[' * 40 + b']' * 40, 'cyb.request.too_deep'),
    # Wide, with an integer Python refuses to read (over 4300 digits).
    (b'[' + b','.join([b'1'] * 50000) + b']', None),
    (b'{"device_profile_name": ' + b'9' * 5000 + b'}', 'cyb.request.malformed_json'),
    # Not UTF-8; UTF-16 without its BOM; a lone surrogate; NaN.
    (b'{"device_profile_name": "\xff\xfe"}', 'cyb.request.malformed_json'),
    ('{"device_profile_name": "dp1"}'.encode('utf-16-le'), 'cyb.request.malformed_json'),
    (b'{"device_profile_name": "\\ud800"}', 'cyb.request.malformed_json'),
    (b'{"\\udfff": 1}', 'cyb.request.malformed_json'),
    (b'{"device_profile_name": NaN}', 'cyb.request.malformed_json'),
    (b'[Infinity]', 'cyb.request.malformed_json'),
    (b'\x00' * 64, 'cyb.request.malformed_json'),
]


@pytest.mark.parametrize('body,code', ADVERSARIAL_BODIES,
                         ids=[f'{i}' for i in range(len(ADVERSARIAL_BODIES))])
@pytest.mark.parametrize('content_type', ['application/json', 'text/plain',
                                          'application/json; charset=latin-1', None])
def test_adversarial_bodies_are_clean_4xx_everywhere(client, seed, database, body, code,
                                                    content_type):
    """Any depth, size, encoding or content type: a 4xx with a stable code on every
    route that takes a body, never a 5xx, and nothing changed."""
    headers = {'Content-Type': content_type} if content_type else {}
    if content_type != 'application/json':
        # Not sent as JSON: refused for that before the body is read.
        code = 'cyb.request.unsupported_media_type'
    before = snapshot(database)
    for method, path in _body_routes(seed):
        r = client.request(method, path, content=body, headers=headers)
        assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text[:500])
        assert set(r.json()) == ERROR_KEYS
        assert r.json()['error_code'].startswith('cyb.'), r.text
        if code is not None:
            assert r.json()['error_code'] == code, (method, path, r.text)
    assert snapshot(database) == before


@pytest.mark.parametrize('content_type,status', [
    ('application/json', 400), ('Application/JSON; charset="UTF-8"', 400),
    ('application/json;charset=utf8', 400), ('text/javascript', 400),
    ('application/javascript', 400),
    ('application/x-www-form-urlencoded', 415), ('text/plain', 415),
    ('application/json-patch+json', 415), ('application/json; charset=latin-1', 415),
    ('application/xml', 415), ('', 415), (None, 415)])
def test_bodies_are_taken_as_json_only(client, seed, database, content_type, status):
    """A body sent under another media type than JSON's (curl -d sends a form's),
    or in another charset than UTF-8, is refused with 415 as upstream Cyborg and
    Placement refuse it, before it is read; the JSON types upstream accepts reach
    the decoder (here: an empty object, which no route takes: 400)."""
    headers = {'Content-Type': content_type} if content_type is not None else {}
    before = snapshot(database)
    for method, path in _body_routes(seed):
        r = client.request(method, path, content=b'{}', headers=headers)
        assert r.status_code == status, (method, path, r.text)
        if status == 415:
            media = (content_type or '').split(';')[0].strip().lower() or 'none'
            assert r.json()['error_code'] == 'cyb.request.unsupported_media_type'
            assert media in r.json()['error_message'], r.text
        else:
            assert r.json()['error_code'] != 'cyb.request.unsupported_media_type'
    assert snapshot(database) == before


def test_request_id_is_logged_with_each_transition(client, seed, caplog):
    make_profile(client, 'dp1')
    arq = client.post('/v2/accelerator_requests',
                      json={'device_profile_name': 'dp1'}).json()['arqs'][0]
    with caplog.at_level(logging.INFO, logger='steward.common.states'):
        r = client.patch('/v2/accelerator_requests', json={arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
            {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert r.status_code == 202
    request_id = r.headers['x-openstack-request-id']
    lines = [rec.getMessage() for rec in caplog.records
             if rec.name == 'steward.common.states']
    assert any(arq['uuid'] in line and '-> BindStarted' in line for line in lines)
    transitions = [line for line in lines if ' -> ' in line]
    assert transitions and all(request_id in line for line in transitions)


def test_global_request_id_is_kept(client):
    gid = f'req-{uuid.uuid4()}'
    r = client.get('/v2/devices', headers={'X-OpenStack-Request-ID': gid})
    assert r.status_code == 200
    assert r.headers['x-openstack-request-id'] != gid       # ours is new


def test_huge_bodies_are_refused(client):
    r = client.post('/v2/device_profiles', content=b'[' + b' ' * (2 * 1024 * 1024) + b']',
                    headers={'Content-Type': 'application/json'})
    assert r.status_code == 413
    assert r.json()['error_code'] == 'cyb.request.too_large'
    assert r.headers['openstack-api-version'] == 'accelerator 2.0'


def test_served_under_a_root_path(app, seed):
    with testclient.TestClient(app, root_path='/accelerator') as c:
        r = c.get('/accelerator/v2')
        assert r.status_code == 200, r.text
        assert r.json()['links'][0]['href'] == 'http://testserver/accelerator/v2/'
        r = c.get('/accelerator/devices')
        assert r.status_code == 200
        assert r.json()['devices'][0]['links'][0]['href'].startswith(
            'http://testserver/accelerator/v2/devices/')


def test_remote_tracebacks_do_not_leak(database, db, seed):
    """oslo.messaging rebuilds a remote error as a ``<Class>_Remote`` subclass
    whose str() carries the remote traceback."""
    class DeviceProfileNotFound_Remote(exception.DeviceProfileNotFound):
        def __str__(self):
            return self.msg + '\nTraceback (most recent call last):\n  File "/srv/x.py"'

    class Manager:
        def arq_create(self, ctx, **kwargs):
            raise DeviceProfileNotFound_Remote(resource='Device Profile', key='name',
                                               value='x')

    app = roots.api_app(LocalConductorAPI(Manager()), database,
                        arqs=arq_api.LocalArqAPI(Manager()))
    with testclient.TestClient(app, raise_server_exceptions=False) as c:
        r = c.post('/v2/accelerator_requests', json={'device_profile_name': 'x'})
    assert r.status_code == 404
    assert r.json()['error_message'] == 'Device Profile not found with name=x'
    assert 'Traceback' not in r.text

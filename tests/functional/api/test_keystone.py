"""[api] auth_strategy = keystone: keystonemiddleware's auth_token in front.

Token validation is replaced by a dictionary of known tokens (what
keystonemiddleware's own AuthTokenFixture does, without its ``fixtures``
dependency); everything else is the real middleware.
"""
import datetime
import uuid

import pytest
from starlette import testclient

from steward.conductor.local_api import LocalConductorAPI
from steward.conf import CONF
from tests.fixtures import roots

TOKENS = {}


def _token(user, project, roles):
    now = datetime.datetime.now(datetime.timezone.utc)
    fmt = '%Y-%m-%dT%H:%M:%S.000000Z'
    domain = {'id': 'default', 'name': 'Default'}
    return {'token': {
        'methods': ['password'], 'issued_at': now.strftime(fmt),
        'expires_at': (now + datetime.timedelta(hours=1)).strftime(fmt),
        'user': {'id': user, 'name': user, 'domain': domain},
        'project': {'id': project, 'name': project, 'domain': domain},
        'roles': [{'id': uuid.uuid4().hex, 'name': r} for r in roles],
        'catalog': []}}


@pytest.fixture
def keystone_client(db, seed, manager, monkeypatch):
    from keystonemiddleware import auth_token
    from keystonemiddleware.auth_token import _exceptions
    from keystonemiddleware.auth_token import _opts

    def fetch_token(self, token, **kwargs):
        try:
            return TOKENS[token]
        except KeyError:
            raise _exceptions.InvalidToken()

    monkeypatch.setattr(auth_token.AuthProtocol, 'fetch_token', fetch_token)
    CONF.register_opts(_opts._OPTS, group='keystone_authtoken')
    CONF.set_override('www_authenticate_uri', 'http://keystone.example/identity',
                      group='keystone_authtoken')
    CONF.set_override('auth_strategy', 'keystone', group='api')
    TOKENS.update({
        'member-token': _token('u1', 'p1', ['member', 'reader']),
        'admin-token': _token('admin', 'p-admin', ['admin', 'member', 'reader']),
        'nova-token': _token('nova', 'service', ['service', 'admin']),
    })
    try:
        app = roots.api_app(LocalConductorAPI(manager), manager.database)
        with testclient.TestClient(app, raise_server_exceptions=False) as c:
            yield c
    finally:
        TOKENS.clear()
        CONF.clear_override('auth_strategy', group='api')
        CONF.clear_override('www_authenticate_uri', group='keystone_authtoken')


def test_version_documents_need_no_token(keystone_client):
    assert keystone_client.get('/').status_code == 200
    assert keystone_client.get('/v2').status_code == 200
    assert keystone_client.get('/v2/').status_code == 200


def test_no_or_bad_token_is_401_json(keystone_client):
    for headers in ({}, {'X-Auth-Token': 'bogus'}):
        r = keystone_client.get('/v2/device_profiles', headers=headers)
        assert r.status_code == 401
        assert r.json()['error_code'] == 'cyb.auth.unauthenticated'
        assert r.headers['www-authenticate'].startswith('Keystone uri=')
        assert r.headers['openstack-api-version'] == 'accelerator 2.0'


def test_identity_headers_cannot_be_forged(keystone_client):
    r = keystone_client.get('/v2/devices', headers={
        'X-Auth-Token': 'member-token', 'X-Roles': 'admin', 'X-Project-Id': 'p9'})
    assert r.status_code == 403


def test_service_roles_cannot_be_forged(keystone_client, seed):
    admin = {'X-Auth-Token': 'admin-token'}
    keystone_client.post('/v2/device_profiles', headers=admin,
                         json=[{'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}])
    member = {'X-Auth-Token': 'member-token', 'X-Service-Roles': 'service'}
    arq = keystone_client.post('/v2/accelerator_requests', headers=member,
                               json={'device_profile_name': 'dp1'}).json()['arqs'][0]
    r = keystone_client.patch('/v2/accelerator_requests', headers=member, json={
        arq['uuid']: [{'op': 'add', 'path': '/hostname', 'value': 'host-a'},
                      {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
                      {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert r.status_code == 403
    assert r.json()['error_code'] == 'cyb.auth.service_token_required'


def test_user_and_service_tokens(keystone_client, seed):
    member = {'X-Auth-Token': 'member-token'}
    admin = {'X-Auth-Token': 'admin-token'}
    assert keystone_client.get('/v2/devices', headers=admin).status_code == 200
    r = keystone_client.post('/v2/device_profiles', headers=admin,
                             json=[{'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}])
    assert r.status_code == 201, r.text
    r = keystone_client.post('/v2/accelerator_requests', headers=member,
                             json={'device_profile_name': 'dp1'})
    assert r.status_code == 201, r.text
    arq = r.json()['arqs'][0]
    assert arq['project_id'] == 'p1'
    body = {arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]}
    r = keystone_client.patch('/v2/accelerator_requests', headers=member, json=body)
    assert r.status_code == 403
    assert r.json()['error_code'] == 'cyb.auth.service_token_required'
    # Nova: the user's token plus its own service token.
    nova = dict(member, **{'X-Service-Token': 'nova-token'})
    r = keystone_client.patch('/v2/accelerator_requests', headers=nova, json=body)
    assert r.status_code == 202, r.text
    listed = keystone_client.get('/v2/accelerator_requests', headers=member).json()
    assert [a['state'] for a in listed['arqs']] == ['Bound']


@pytest.fixture
def nova_service_role():
    """[api] service_token_roles = nova_service, keystonemiddleware's own option left
    at its default (service): set before the app (and its auth_token) is built."""
    CONF.set_override('service_token_roles', ['nova_service'], group='api')
    TOKENS['nova-custom-token'] = _token('nova', 'service', ['nova_service'])
    yield
    CONF.clear_override('service_token_roles', group='api')


def _bind_body(seed, arq):
    return {arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]}


def test_one_service_token_roles_setting(nova_service_role, keystone_client, seed):
    """keystonemiddleware checks the service token's roles too (and rejects the
    token when they are missing): it must check the ones [api] names."""
    admin, member = {'X-Auth-Token': 'admin-token'}, {'X-Auth-Token': 'member-token'}
    keystone_client.post('/v2/device_profiles', headers=admin,
                         json=[{'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}])
    arq = keystone_client.post('/v2/accelerator_requests', headers=member,
                               json={'device_profile_name': 'dp1'}).json()['arqs'][0]
    # The default role is no longer a service role, for either layer.
    r = keystone_client.patch('/v2/accelerator_requests', json=_bind_body(seed, arq),
                              headers=dict(member, **{'X-Service-Token': 'nova-token'}))
    assert r.status_code in (401, 403), r.text
    r = keystone_client.patch('/v2/accelerator_requests', json=_bind_body(seed, arq),
                              headers=dict(member, **{'X-Service-Token': 'nova-custom-token'}))
    assert r.status_code == 202, r.text


def test_a_different_keystone_authtoken_setting_is_named_and_ignored(caplog):
    from steward.api import auth
    CONF.set_override('service_token_roles', ['service'], group='api')
    auth.service_token_roles()
    CONF.set_override('service_token_roles', ['other'], group='keystone_authtoken')
    try:
        with caplog.at_level('WARNING', logger='steward.api.auth'):
            assert auth.service_token_roles() == ['service']
    finally:
        CONF.clear_override('service_token_roles', group='keystone_authtoken')
        CONF.clear_override('service_token_roles', group='api')
    warned = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
    assert len(warned) == 1
    assert '[keystone_authtoken] service_token_roles = other is ignored' in warned[0]
    assert '[api] service_token_roles = service' in warned[0]


def test_healthcheck_needs_no_token(keystone_client):
    assert keystone_client.get('/v2/devices').status_code == 401
    r = keystone_client.get('/healthcheck')
    assert (r.status_code, r.text) == (200, 'OK')

"""The production checks of ``[api] auth_strategy = keystone`` against a real
Keystone 30 (tests/fixtures/keystone_fixture.py) and ``steward serve`` (tests/fixtures/keystone_stack.py),
with real tokens instead of tests/functional/api/test_keystone.py's dictionary:
tokens are checked, bind and delete-by-instance need a service token, and one
project never sees another's accelerator requests."""
import uuid

import httpx
import pytest

from tests.fixtures import keystone_fixture
from tests.fixtures import keystone_stack
from tests.fixtures import requirements
from tests.fixtures import side_venv

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('keystone')]

PASSWORD = 'user-secret'


@pytest.fixture(scope='session')
def env():
    try:
        side_venv.ensure('keystone')
    except side_venv.BuildError as exc:
        requirements.need('pypi', f'keystone venv: {exc}')
    keystone = keystone_fixture.get_keystone()
    suffix = uuid.uuid4().hex[:8]
    users = {
        'member_a': (f'proj-a-{suffix}', ['member', 'reader']),
        'member_b': (f'proj-b-{suffix}', ['member', 'reader']),
        'nova': ('service', ['service']),
        'not_a_service': (f'proj-a-{suffix}', ['member']),
    }
    tokens = {}
    for name, (project, roles) in users.items():
        user = f'{name}-{suffix}'
        keystone.user(user, PASSWORD, project=project, roles=roles)
        tokens[name] = keystone.token(user, PASSWORD, project_name=project)
    tokens['admin'] = keystone.admin().get_token()
    stack = keystone_stack.shared(keystone)
    with httpx.Client(base_url=stack.url, timeout=30) as api:
        r = api.post('/v2/device_profiles', headers={'X-Auth-Token': tokens['admin']},
                     json=[{'name': f'dp-{suffix}', 'groups': [{'resources:FPGA': '1'}]}])
        assert r.status_code == 201, r.text
        yield api, tokens, f'dp-{suffix}'


def _as(tokens, who, service=None):
    headers = {'X-Auth-Token': tokens[who]}
    if service:
        headers['X-Service-Token'] = tokens[service]
    return headers


def test_tokens_are_checked(env):
    api, tokens, _ = env
    assert api.get('/v2/accelerator_requests').status_code == 401
    assert api.get('/v2/accelerator_requests',
                   headers={'X-Auth-Token': 'garbage'}).status_code == 401
    assert api.get('/v2/accelerator_requests',
                   headers=_as(tokens, 'member_a')).status_code == 200
    # Identity headers sent by the caller are replaced from the token.
    forged = dict(_as(tokens, 'member_a'), **{'X-Roles': 'admin', 'X-Service-Roles':
                                              'service'})
    r = api.post('/v2/device_profiles', headers=forged,
                 json=[{'name': 'forged', 'groups': [{'resources:FPGA': '1'}]}])
    assert r.status_code == 403, r.text
    # The version documents need no token.
    assert api.get('/v2').status_code == 200


def test_projects_are_isolated(env):
    api, tokens, dp = env
    r = api.post('/v2/accelerator_requests', headers=_as(tokens, 'member_a'),
                 json={'device_profile_name': dp})
    assert r.status_code == 201, r.text
    arq = r.json()['arqs'][0]['uuid']
    listed = api.get('/v2/accelerator_requests', headers=_as(tokens, 'member_b')).json()
    assert arq not in [a['uuid'] for a in listed['arqs']]
    assert api.get(f'/v2/accelerator_requests/{arq}',
                   headers=_as(tokens, 'member_b')).status_code == 404
    assert api.delete(f'/v2/accelerator_requests?arqs={arq}',
                      headers=_as(tokens, 'member_b')).status_code == 404
    assert api.get(f'/v2/accelerator_requests/{arq}',
                   headers=_as(tokens, 'member_a')).status_code == 200
    assert api.delete(f'/v2/accelerator_requests?arqs={arq}',
                      headers=_as(tokens, 'member_a')).status_code == 204


def test_bind_and_delete_by_instance_need_a_service_token(env):
    api, tokens, dp = env
    r = api.post('/v2/accelerator_requests', headers=_as(tokens, 'member_a'),
                 json={'device_profile_name': dp})
    assert r.status_code == 201, r.text
    arq = r.json()['arqs'][0]['uuid']
    rp = api.get('/v2/deployables', headers=_as(tokens, 'admin')).json()[
        'deployables'][0]['rp_uuid']
    instance = str(uuid.uuid4())
    body = {arq: [{'op': 'add', 'path': '/hostname', 'value': 'keystone-stack-host'},
                  {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
                  {'op': 'add', 'path': '/instance_uuid', 'value': instance}]}
    # The user's token alone, even an admin's: refused.
    for who in ('member_a', 'admin'):
        r = api.patch('/v2/accelerator_requests', headers=_as(tokens, who), json=body)
        assert r.status_code == 403, r.text
    # A service token whose user lacks the service role: keystonemiddleware's 401.
    r = api.patch('/v2/accelerator_requests',
                  headers=_as(tokens, 'member_a', service='not_a_service'), json=body)
    assert r.status_code == 401, r.text
    # Nova: the user's token and its own service token.
    r = api.patch('/v2/accelerator_requests',
                  headers=_as(tokens, 'member_a', service='nova'), json=body)
    assert r.status_code == 202, r.text
    got = api.get(f'/v2/accelerator_requests/{arq}', headers=_as(tokens, 'member_a'))
    assert got.json()['state'] == 'Bound'
    url = f'/v2/accelerator_requests?instance={instance}'
    assert api.delete(url, headers=_as(tokens, 'member_a')).status_code == 403
    assert api.delete(url, headers=_as(tokens, 'member_a', service='nova')).status_code \
        == 204
    assert api.get(f'/v2/accelerator_requests/{arq}',
                   headers=_as(tokens, 'member_a')).status_code == 404

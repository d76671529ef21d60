"""Who may call what: every route of the API × every persona, with the status each
gets under today's policy defaults (steward/common/policy.py), in one table, the
way Placement keeps its policy stories.

The deployment is the real one behind ``[api] auth_strategy = keystone``:
keystonemiddleware's auth_token turns tokens into identities (token validation is
a dictionary of known tokens, as in test_keystone.py), then the policy engine and
the handlers decide. Each cell runs on a fresh seeded database: one FPGA device
with a deployable and an attribute, the device profile ``dp1`` with an accelerator
request of project A, and the unused profile ``dp-free``.

A route added to the app without a row here fails
``test_every_route_has_a_row``. A status that changes fails its cell: change the
table only together with the policy (and its release note).
"""
import datetime
import uuid

import pytest
from starlette import testclient

from steward.api import app as api_app
from steward.conductor.local_api import LocalConductorAPI
from steward.conf import CONF
from steward.db import models as m
from tests.fixtures import roots

PROJECT_A, PROJECT_B = 'p-a', 'p-b'
# Persona -> (roles, project) of its token; None: no token at all.
PERSONAS = {
    'anonymous': None,
    'reader': (['reader'], PROJECT_A),
    'member_a': (['member', 'reader'], PROJECT_A),
    'member_b': (['member', 'reader'], PROJECT_B),
    'admin': (['admin', 'member', 'reader'], 'p-admin'),
    # A service account alone (Nova's user): its token is also its service token.
    'service': (['service'], 'service'),
    # A project's manager reads devices, deployables and attributes (upstream).
    'manager_a': (['manager', 'member', 'reader'], PROJECT_A),
    # A system-scoped reader (an operator's monitoring account): project None.
    'sys_reader': (['reader'], None),
}
COLUMNS = tuple(PERSONAS)


def _bind_body(ids):
    return {ids['arq']: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': ids['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': ids['instance']}]}


def _program_body(ids):
    return [{'path': '/program', 'op': 'replace',
             'value': [{'image_uuid': str(uuid.uuid4())}]}]


# The table. Per route: the request made (path with the seeded ids, body), then the
# status of each persona, in COLUMNS order:
#   anonymous reader member_a member_b admin service manager_a sys_reader
TABLE = [
    # The version documents need nobody.
    ('GET', '/', '/', None, (200, 200, 200, 200, 200, 200, 200, 200)),
    ('GET', '/v2', '/v2', None, (200, 200, 200, 200, 200, 200, 200, 200)),
    # Devices: reads for the admin and a project's manager (upstream's rule, for
    # capacity planning; project-scoped, so a system-scoped token is refused);
    # changes for admins; erase records and history for the cloud operator (admin
    # or system reader). (The FPGA cannot be cleaned: an admin's clean is refused
    # after policy, 400.)
    ('GET', '/v2/devices', '/v2/devices', None, (401, 403, 403, 403, 200, 403, 200, 403)),
    ('GET', '/v2/devices/{uuid}', '/v2/devices/{device}', None,
     (401, 403, 403, 403, 200, 403, 200, 403)),
    ('POST', '/v2/devices/{uuid}/enable', '/v2/devices/{device}/enable', None,
     (401, 403, 403, 403, 200, 403, 403, 403)),
    ('POST', '/v2/devices/{uuid}/disable', '/v2/devices/{device}/disable', None,
     (401, 403, 403, 403, 200, 403, 403, 403)),
    ('POST', '/v2/devices/{uuid}/clean', '/v2/devices/{device}/clean', None,
     (401, 403, 403, 403, 400, 403, 403, 403)),
    ('GET', '/v2/devices/{uuid}/clean_plan', '/v2/devices/{device}/clean_plan', None,
     (401, 403, 403, 403, 200, 403, 403, 403)),
    ('GET', '/v2/devices/{uuid}/erase_records', '/v2/devices/{device}/erase_records',
     None, (401, 403, 403, 403, 200, 403, 403, 200)),
    ('GET', '/v2/devices/{uuid}/history', '/v2/devices/{device}/history', None,
     (401, 403, 403, 403, 200, 403, 403, 200)),
    # Deployables (the fake driver cannot program: 400 after policy) and attributes.
    ('GET', '/v2/deployables', '/v2/deployables', None, (401, 403, 403, 403, 200, 403, 200, 403)),
    ('GET', '/v2/deployables/{uuid}', '/v2/deployables/{deployable}', None,
     (401, 403, 403, 403, 200, 403, 200, 403)),
    ('PATCH', '/v2/deployables/{uuid}/program', '/v2/deployables/{deployable}/program',
     _program_body, (401, 403, 403, 403, 400, 403, 403, 403)),
    ('PATCH', '/v2/deployables/{uuid}/program/{again}',
     '/v2/deployables/{deployable}/program/{deployable}', _program_body,
     (401, 403, 403, 403, 400, 403, 403, 403)),
    ('GET', '/v2/attributes', '/v2/attributes', None, (401, 403, 403, 403, 200, 403, 200, 403)),
    ('POST', '/v2/attributes', '/v2/attributes',
     lambda ids: {'deployable_id': ids['deployable_id'], 'key': 'k', 'value': 'v'},
     (401, 403, 403, 403, 201, 403, 403, 403)),
    ('GET', '/v2/attributes/{uuid}', '/v2/attributes/{attribute}', None,
     (401, 403, 403, 403, 200, 403, 200, 403)),
    ('DELETE', '/v2/attributes/{uuid}', '/v2/attributes/{attribute}', None,
     (401, 403, 403, 403, 204, 403, 403, 403)),
    # Device profiles: read by anyone with a project role, written by admins.
    ('GET', '/v2/device_profiles', '/v2/device_profiles', None,
     (401, 200, 200, 200, 200, 403, 200, 403)),
    ('POST', '/v2/device_profiles', '/v2/device_profiles',
     lambda ids: [{'name': 'dp-new', 'groups': [{'resources:FPGA': '1'}]}],
     (401, 403, 403, 403, 201, 403, 403, 403)),
    ('DELETE', '/v2/device_profiles', '/v2/device_profiles?value=dp-free', None,
     (401, 403, 403, 403, 204, 403, 403, 403)),
    ('GET', '/v2/device_profiles/{name_or_uuid}', '/v2/device_profiles/{profile}', None,
     (401, 200, 200, 200, 200, 403, 200, 403)),
    ('DELETE', '/v2/device_profiles/{name_or_uuid}', '/v2/device_profiles/{free_profile}',
     None, (401, 403, 403, 403, 204, 403, 403, 403)),
    # Accelerator requests (the seeded one is project A's): project B does not see
    # it (404); bind needs a service token (403 for everyone else, admin included);
    # a service may delete any project's.
    ('GET', '/v2/accelerator_requests', '/v2/accelerator_requests', None,
     (401, 200, 200, 200, 200, 403, 200, 403)),
    ('POST', '/v2/accelerator_requests', '/v2/accelerator_requests',
     lambda ids: {'device_profile_name': 'dp1'}, (401, 403, 201, 201, 201, 201, 201, 403)),
    ('PATCH', '/v2/accelerator_requests', '/v2/accelerator_requests', _bind_body,
     (401, 403, 403, 403, 403, 202, 403, 403)),
    ('DELETE', '/v2/accelerator_requests', '/v2/accelerator_requests?arqs={arq}', None,
     (401, 403, 204, 404, 204, 204, 204, 403)),
    ('GET', '/v2/accelerator_requests/{uuid}', '/v2/accelerator_requests/{arq}', None,
     (401, 200, 200, 404, 200, 403, 200, 403)),
    ('PATCH', '/v2/accelerator_requests/{uuid}', '/v2/accelerator_requests/{arq}',
     _bind_body, (401, 403, 403, 403, 403, 202, 403, 403)),
    ('DELETE', '/v2/accelerator_requests/{uuid}', '/v2/accelerator_requests/{arq}',
     None, (401, 403, 204, 404, 204, 204, 204, 403)),
]

TOKENS = {}


def _token(user, project, roles):
    now = datetime.datetime.now(datetime.timezone.utc)
    fmt = '%Y-%m-%dT%H:%M:%S.000000Z'
    domain = {'id': 'default', 'name': 'Default'}
    token = {
        'methods': ['password'], 'issued_at': now.strftime(fmt),
        'expires_at': (now + datetime.timedelta(hours=1)).strftime(fmt),
        'user': {'id': user, 'name': user, 'domain': domain},
        'roles': [{'id': uuid.uuid4().hex, 'name': r} for r in roles],
        'catalog': []}
    if project is None:
        token['system'] = {'all': True}
    else:
        token['project'] = {'id': project, 'name': project, 'domain': domain}
    return {'token': token}


def _headers(persona):
    headers = {'OpenStack-API-Version': 'accelerator latest'}
    if PERSONAS[persona] is not None:
        headers['X-Auth-Token'] = f'{persona}-token'
        if persona == 'service':
            headers['X-Service-Token'] = f'{persona}-token'
    return headers


@pytest.fixture
def keystone(database, db, seed, manager, placement, monkeypatch):
    """The app behind auth_token, and the seeded ids."""
    from keystonemiddleware import auth_token
    from keystonemiddleware.auth_token import _exceptions
    from keystonemiddleware.auth_token import _opts

    def fetch_token(self, token, **kwargs):
        try:
            return TOKENS[token]
        except KeyError:
            raise _exceptions.InvalidToken()

    monkeypatch.setattr(auth_token.AuthProtocol, 'fetch_token', fetch_token)
    placement.stats = {}                # what /metrics reads of a Placement client
    CONF.register_opts(_opts._OPTS, group='keystone_authtoken')
    CONF.set_override('www_authenticate_uri', 'http://keystone.example/identity',
                      group='keystone_authtoken')
    CONF.set_override('auth_strategy', 'keystone', group='api')
    for persona, spec in PERSONAS.items():
        if spec is not None:
            TOKENS[f'{persona}-token'] = _token(persona, spec[1], spec[0])
    ids = dict(seed, instance=str(uuid.uuid4()))
    try:
        app = roots.api_app(LocalConductorAPI(manager), manager.database)
        with testclient.TestClient(app, raise_server_exceptions=False) as client:
            admin = _headers('admin')
            for name in ('dp1', 'dp-free'):
                r = client.post('/v2/device_profiles', headers=admin, json=[
                    {'name': name, 'groups': [{'resources:FPGA': '1'}]}])
                assert r.status_code == 201, r.text
                ids['profile' if name == 'dp1' else 'free_profile'] = r.json()['uuid']
            r = client.post('/v2/accelerator_requests', headers=_headers('member_a'),
                            json={'device_profile_name': 'dp1'})
            assert r.status_code == 201, r.text
            ids['arq'] = r.json()['arqs'][0]['uuid']
            with database.reader() as s:
                ids['attribute'] = s.query(m.Attribute).first().uuid
            yield client, ids
    finally:
        TOKENS.clear()
        CONF.clear_override('auth_strategy', group='api')
        CONF.clear_override('www_authenticate_uri', group='keystone_authtoken')


def _cells():
    for method, route, path, body, statuses in TABLE:
        for persona, status in zip(COLUMNS, statuses):
            yield pytest.param(method, path, body, persona, status,
                               id=f'{method} {route} {persona}')


@pytest.mark.parametrize('method,path,body,persona,status', list(_cells()))
def test_route_persona_status(keystone, method, path, body, persona, status):
    client, ids = keystone
    r = client.request(method, path.format(**ids), headers=_headers(persona),
                       json=body(ids) if body else None)
    assert r.status_code == status, r.text
    auth_codes = {401: {'cyb.auth.unauthenticated'},
                  403: {'cyb.auth.forbidden', 'cyb.auth.service_token_required'}}
    if status >= 400:
        code = r.json()['error_code']
        # A refusal is the auth layer's; any other error came after policy allowed.
        assert (code in auth_codes.get(status, ())) == (status in auth_codes), code


def test_every_route_has_a_row():
    rows = {(method, route) for method, route, *_ in TABLE}
    routes = {(method, route) for route, methods in api_app.ROUTES.items()
              for method in methods}
    assert rows == routes
    assert len(rows) == len(TABLE)
    assert all(statuses and len(statuses) == len(COLUMNS) for *_, statuses in TABLE)

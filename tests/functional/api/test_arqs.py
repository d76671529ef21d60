"""Accelerator requests: create, list/get, bind/unbind PATCH, delete."""
import uuid

import pytest

from steward.common import states
from tests.functional.api.conftest import MEMBER, MEMBER_PROJECT, MEMBER_SERVICE, \
    OTHER_MEMBER_SERVICE, READER, identity, make_profile, mv, snapshot

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)

ARQ_FIELDS = {'uuid', 'state', 'device_profile_name', 'device_profile_group_id',
              'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
              'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info',
              'created_at', 'updated_at', 'links'}
URL = '/v2/accelerator_requests'


@pytest.fixture
def dp(client):
    return make_profile(client, 'dp1', [{'resources:FPGA': '1'}])


def create(client, name='dp1', headers=None):
    r = client.post(URL, json={'device_profile_name': name}, headers=headers or {})
    assert r.status_code == 201, r.text
    return r.json()['arqs']


def bind_ops(seed, instance, hostname='host-a', rp=None, project=None):
    ops = [{'op': 'add', 'path': '/hostname', 'value': hostname},
           {'op': 'add', 'path': '/device_rp_uuid', 'value': rp or seed['rp']},
           {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
    if project:
        ops.append({'op': 'add', 'path': '/project_id', 'value': project})
    return ops


UNBIND_OPS = [{'path': '/hostname', 'op': 'remove'},
              {'path': '/instance_uuid', 'op': 'remove'},
              {'path': '/device_rp_uuid', 'op': 'remove'}]


# --- create -----------------------------------------------------------------------
def test_create_one_per_accelerator(client, seed):
    make_profile(client, 'multi', [{'resources:FPGA': '2'},
                                   {'resources:FPGA': '1', 'trait:CUSTOM_X': 'required'}])
    arqs = create(client, 'multi', headers=MEMBER)
    assert [a['device_profile_group_id'] for a in arqs] == [0, 0, 1]
    for a in arqs:
        assert set(a) == ARQ_FIELDS
        assert a['state'] == 'Initial' and a['project_id'] == MEMBER_PROJECT
        assert a['attach_handle_type'] == '' and a['attach_handle_info'] == {}
        assert a['hostname'] is None and a['instance_uuid'] is None
        assert a['links'] == [{'href': f'http://testserver{URL}/{a["uuid"]}',
                               'rel': 'self'}]


@pytest.mark.parametrize('body,status,code', [
    ({}, 400, 'cyb.request.schema'),
    # No profile has that name: upstream's 404, not a schema error.
    ({'device_profile_name': ''}, 404, 'cyb.device_profile.not_found'),
    ({'device_profile_name': 'x' * 256}, 404, 'cyb.device_profile.not_found'),
    ({'device_profile_name': 'a\x00b'}, 404, 'cyb.device_profile.not_found'),
    ({'device_profile_name': 7}, 400, 'cyb.request.schema'),
    ({'device_profile_name': 'dp1', 'device_profile_group_id': 7}, 400,
     'cyb.request.schema'),
    ([{'device_profile_name': 'dp1'}], 400, 'cyb.request.schema'),
    ({'device_profile_name': 'no-such-dp'}, 404, 'cyb.device_profile.not_found'),
])
def test_create_bad_input(database, client, dp, body, status, code):
    before = snapshot(database)
    r = client.post(URL, json=body)
    assert r.status_code == status, r.text
    assert r.json()['error_code'] == code
    assert snapshot(database) == before


def test_create_refuses_a_stored_profile_beyond_256_accelerators(database, client, seed):
    """A profile the API would refuse, stored before it bounded the amounts or
    taken over from Cyborg: its ARQ create is a 400 before anything is built (it
    built and inserted as many rows as it asked for: 2**31 held an API thread)."""
    from steward.db import device_profiles as profile_db
    with database.writer() as s:
        profile_db.device_profile_create(s, 'huge', [{'resources:FPGA': '100000'}])
    before = snapshot(database)
    r = client.post(URL, json={'device_profile_name': 'huge'})
    assert r.status_code == 400, r.text[:300]
    assert r.json()['error_code'] == 'cyb.device_profile.invalid'
    assert r.json()['error_message'] == (
        'Invalid device profile: profile huge asks for 100000 accelerators, more than '
        '256: create it again with fewer')
    assert snapshot(database) == before


def test_create_messages(client, dp):
    r = client.post(URL, json={'device_profile_name': 'no-such-dp'})
    assert r.json()['error_message'] == 'Device Profile not found with name=no-such-dp'
    r = client.post(URL, json={})
    assert "'device_profile_name' is a required property" in r.json()['error_message']
    r = client.post(URL, content=b'')
    assert r.status_code == 400 and 'body is required' in r.json()['error_message']
    r = client.post(URL, content=b'{"device_profile_name": ',
                    headers={'Content-Type': 'application/json'})
    assert r.status_code == 400
    assert r.json()['error_message'] == 'Request is not in valid JSON format.'


# --- read -------------------------------------------------------------------------
def test_list_and_get_are_scoped_by_project(client, dp):
    mine = create(client, headers=MEMBER)[0]
    theirs = create(client, headers=OTHER_MEMBER_SERVICE)[0]
    listed = client.get(URL, headers=MEMBER).json()['arqs']
    assert [a['uuid'] for a in listed] == [mine['uuid']]
    assert client.get(f'{URL}/{mine["uuid"]}', headers=MEMBER).json() == mine
    r = client.get(f'{URL}/{theirs["uuid"]}', headers=MEMBER)
    assert r.status_code == 404
    assert r.json()['error_code'] == 'cyb.arq.not_found'
    # Admins and services see everything.
    assert len(client.get(URL).json()['arqs']) == 2
    # A non-admin caller without a project sees nothing.
    no_project = identity(['reader'], project=None)
    assert client.get(URL, headers=no_project).json() == {'arqs': []}
    # Readers may read, not write.
    assert client.get(URL, headers=READER).status_code == 200
    r = client.post(URL, headers=READER, json={'device_profile_name': 'dp1'})
    assert r.status_code == 403
    assert r.json()['error_message'] == \
        'Access was denied to the following resource: cyborg:arq:create'


@pytest.mark.parametrize('query,code', [
    ('instance=not-a-uuid', 'cyb.request.invalid_uuid'),
    ('instance=9b2f6c1e-3c0e-4d8e-8a51-2f0c7f1b5a01&bind_state=bogus', 'cyb.request.invalid_parameter'),
    ('bind_state=bound', 'cyb.request.invalid_parameter'),
    ('instance_uuid=x', 'cyb.request.invalid_query'),
])
def test_list_bad_queries(client, query, code):
    r = client.get(f'{URL}?{query}')
    assert r.status_code == 400
    assert r.json()['error_code'] == code


def test_get_bad_uuid(client):
    r = client.get(f'{URL}/not-a-uuid')
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_uuid'
    assert client.get(f'{URL}/{uuid.uuid4()}').status_code == 404


# --- Nova's sequence --------------------------------------------------------------
def test_nova_sequence_leaves_the_db_as_before(database, client, seed, dp, manager):
    """What Nova 34 sends (no microversion header, user token + service token)."""
    before = snapshot(database)
    nova = MEMBER_SERVICE
    instance = str(uuid.uuid4())
    r = client.get('/v2/device_profiles?name=dp1', headers=nova)
    assert len(r.json()['device_profiles']) == 1
    groups = r.json()['device_profiles'][0]['groups']
    assert groups == [{'resources:FPGA': '1'}]
    arqs = create(client, headers=nova)
    assert len(arqs) == 1
    r = client.patch(URL, headers=nova,
                     json={a['uuid']: bind_ops(seed, instance) for a in arqs})
    assert (r.status_code, r.content) == (202, b'')
    assert r.headers['openstack-api-version'] == 'accelerator 2.0'
    assert manager.notifier.events == [(instance, arqs[0]['uuid'], 'completed')]
    # nova-compute polls without bind_state; the API also offers resolved.
    r = client.get(f'{URL}?instance={instance}', headers=nova)
    assert [a['state'] for a in r.json()['arqs']] == ['Bound']
    r = client.get(f'{URL}?instance={instance}&bind_state=resolved', headers=nova)
    assert r.status_code == 200
    bound = r.json()['arqs'][0]
    assert bound['state'] == 'Bound' and bound['hostname'] == 'host-a'
    assert bound['instance_uuid'] == instance and bound['device_rp_uuid'] == seed['rp']
    assert bound['attach_handle_type'] == 'TEST_PCI'
    assert set(bound['attach_handle_info']) == {'domain', 'bus', 'device', 'function'}
    assert bound['project_id'] == MEMBER_PROJECT
    r = client.delete(f'{URL}?instance={instance}', headers=nova)
    assert (r.status_code, r.content) == (204, b'')
    # Idempotent: Nova may delete twice.
    assert client.delete(f'{URL}?instance={instance}', headers=nova).status_code == 204
    assert client.get(f'{URL}?instance={instance}', headers=nova).json() == {'arqs': []}
    assert snapshot(database) == before


def test_resolved_poll_is_423_while_binding(database, client, seed, dp):
    arq = create(client)[0]
    instance = str(uuid.uuid4())
    from steward.db import models as m
    with database.writer() as s:
        row = s.query(m.ExtARQ).filter_by(uuid=arq['uuid']).one()
        row.state, row.instance_uuid = states.ARQ_BIND_STARTED, instance
    r = client.get(f'{URL}?instance={instance}&bind_state=resolved')
    assert (r.status_code, r.content) == (423, b'')
    assert r.headers['openstack-api-version'] == 'accelerator 2.0'
    # Without bind_state the list is served.
    assert client.get(f'{URL}?instance={instance}').status_code == 200
    # bind_state=resolved alone lists the resolved ones only.
    assert client.get(f'{URL}?bind_state=resolved').json() == {'arqs': []}


def test_bind_and_unbind_on_the_arq_url(client, seed, dp):
    """openstacksdk/OSC send the keyed body to /accelerator_requests/{uuid}."""
    arq = create(client)[0]
    instance = str(uuid.uuid4())
    url = f'{URL}/{arq["uuid"]}'
    r = client.patch(url, json={arq['uuid']: bind_ops(seed, instance)})
    assert r.status_code == 202, r.text
    assert client.get(url).json()['state'] == 'Bound'
    r = client.patch(url, json={arq['uuid']: UNBIND_OPS})
    assert r.status_code == 202, r.text
    got = client.get(url).json()
    assert got['state'] == 'Unbound' and got['instance_uuid'] is None
    assert got['attach_handle_info'] == {} and got['attach_handle_type'] == ''
    # Unbound ARQs can be bound again.
    r = client.patch(url, json={arq['uuid']: bind_ops(seed, instance)})
    assert r.status_code == 202
    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404


def test_project_id_needs_2_1_and_admin(database, client, seed, dp):
    arq = create(client, headers=MEMBER)[0]
    body = {arq['uuid']: bind_ops(seed, str(uuid.uuid4()), project='p-new')}
    before = snapshot(database)
    r = client.patch(URL, json=body)                         # 2.0
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.schema'
    assert "'/project_id'" in r.json()['error_message']
    r = client.patch(URL, json=body, headers=dict(MEMBER_SERVICE, **mv('2.1')))
    assert r.status_code == 403
    assert snapshot(database) == before
    r = client.patch(URL, json=body, headers=mv('2.1'))      # noauth admin + service
    assert r.status_code == 202, r.text
    assert client.get(f'{URL}/{arq["uuid"]}').json()['project_id'] == 'p-new'


def _bad_patches(seed, arq):
    inst = str(uuid.uuid4())
    ops = bind_ops(seed, inst)
    return [
        # (body, status, error code)
        ({}, 400, 'cyb.request.schema'),
        ([], 400, 'cyb.request.schema'),
        ({arq: []}, 400, 'cyb.request.schema'),
        ({arq: {}}, 400, 'cyb.request.schema'),
        ({'not-a-uuid': ops}, 400, 'cyb.request.invalid_uuid'),
        ({arq: [dict(ops[0], op='replace')] + ops[1:]}, 400, 'cyb.request.schema'),
        ({arq: [dict(ops[0], path='/state')] + ops[1:]}, 400, 'cyb.request.schema'),
        ({arq: ops[1:]}, 400, 'cyb.arq.patch_invalid'),                  # no hostname
        ({arq: ops[:2]}, 400, 'cyb.arq.patch_invalid'),                  # no instance
        ({arq: ops + [ops[0]]}, 400, 'cyb.arq.patch_invalid'),           # twice
        ({arq: ops[:2] + [UNBIND_OPS[1]]}, 400, 'cyb.arq.patch_invalid'),  # mixed
        ({arq: [ops[0], ops[1], dict(ops[2], value='not-a-uuid')]}, 400,
         'cyb.request.invalid_uuid'),
        ({arq: [ops[0], dict(ops[1], value='nope'), ops[2]]}, 400,
         'cyb.request.invalid_uuid'),
        ({arq: [dict(ops[0], value='   ')] + ops[1:]}, 400, 'cyb.arq.patch_invalid'),
        ({arq: [dict(ops[0], value='')] + ops[1:]}, 400, 'cyb.request.schema'),
        ({arq: [dict(ops[0], value=7)] + ops[1:]}, 400, 'cyb.request.schema'),
        ({arq: [{'op': 'add', 'path': '/hostname'}] + ops[1:]}, 400,
         'cyb.arq.patch_invalid'),
        ({arq: [dict(ops[0], extra=1)] + ops[1:]}, 400, 'cyb.request.schema'),
        ({arq: [dict(UNBIND_OPS[0], value='x')]}, 400, 'cyb.arq.patch_invalid'),
        ({arq: ops, str(uuid.uuid4()): UNBIND_OPS}, 400, 'cyb.arq.patch_invalid'),
        # Unknown ARQ, unknown device RP: 404, nothing changed (upstream defect 2).
        ({str(uuid.uuid4()): ops}, 404, 'cyb.arq.not_found'),
        ({arq: bind_ops(seed, inst, rp=str(uuid.uuid4()))}, 404,
         'cyb.deployable.not_found'),
        ({arq: ops, str(uuid.uuid4()): bind_ops(seed, inst)}, 404, 'cyb.arq.not_found'),
    ]


def test_bad_patches_change_nothing(database, client, seed, dp):
    arq = create(client)[0]['uuid']
    before = snapshot(database)
    for body, status, code in _bad_patches(seed, arq):
        r = client.patch(URL, json=body)
        assert (r.status_code, r.json()['error_code']) == (status, code), (body, r.text)
        assert r.json()['error_message'] == r.json()['faultstring']
        assert snapshot(database) == before, body
    # And the ARQ is still bindable (never stuck in BindStarted).
    r = client.patch(URL, json={arq: bind_ops(seed, str(uuid.uuid4()))})
    assert r.status_code == 202


def test_missing_field_message(client, seed, dp):
    arq = create(client)[0]['uuid']
    r = client.patch(URL, json={arq: bind_ops(seed, str(uuid.uuid4()))[1:]})
    assert r.json()['error_message'] == \
        'Invalid ARQ patch: Fields absent in patch: hostname'


def test_patch_on_arq_url_must_name_that_arq(database, client, seed, dp):
    a, b = create(client)[0], create(client)[0]
    before = snapshot(database)
    r = client.patch(f'{URL}/{a["uuid"]}',
                     json={b['uuid']: bind_ops(seed, str(uuid.uuid4()))})
    assert r.status_code == 400
    assert client.patch(f'{URL}/nope', json={}).status_code == 400
    assert snapshot(database) == before


def test_rebind_of_bound_arq_and_second_instance_bind(database, client, seed, dp):
    arq = create(client)[0]['uuid']
    inst = str(uuid.uuid4())
    assert client.patch(URL, json={arq: bind_ops(seed, inst)}).status_code == 202
    before = snapshot(database)
    r = client.patch(URL, json={arq: bind_ops(seed, inst)})
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.arq.bad_state'
    other = create(client)[0]['uuid']
    before = snapshot(database)
    r = client.patch(URL, json={other: bind_ops(seed, inst)})
    assert r.status_code == 400
    assert r.json()['error_code'] == 'cyb.arq.instance_already_bound'
    assert snapshot(database) == before


def test_bind_needs_a_service_token(database, client, seed, dp):
    arq = create(client, headers=MEMBER)[0]['uuid']
    before = snapshot(database)
    for body in ({arq: bind_ops(seed, str(uuid.uuid4()))}, {arq: UNBIND_OPS}):
        r = client.patch(URL, json=body, headers=MEMBER)
        assert r.status_code == 403
        assert r.json()['error_code'] == 'cyb.auth.service_token_required'
        assert r.json()['error_message'] == (
            'This operation requires a service token. Use the Compute API to manage '
            'instance accelerators.')
    r = client.patch(URL, json={arq: bind_ops(seed, str(uuid.uuid4()))}, headers=READER)
    assert r.status_code == 403
    assert r.json()['error_code'] == 'cyb.auth.forbidden'
    assert snapshot(database) == before
    r = client.patch(URL, json={arq: bind_ops(seed, str(uuid.uuid4()))},
                     headers=MEMBER_SERVICE)
    assert r.status_code == 202


def test_other_projects_arq_cannot_be_bound_or_deleted(database, client, seed, dp):
    theirs = create(client, headers=OTHER_MEMBER_SERVICE)[0]['uuid']
    member_with_service = identity(['member', 'reader'], service=False)
    before = snapshot(database)
    r = client.delete(f'{URL}?arqs={theirs}', headers=member_with_service)
    assert r.status_code == 404
    r = client.delete(f'{URL}/{theirs}', headers=member_with_service)
    assert r.status_code == 404
    assert snapshot(database) == before


# --- delete -----------------------------------------------------------------------
@pytest.mark.parametrize('query,status,code', [
    ('', 400, 'cyb.request.invalid_query'),
    ('?arqs=9b2f6c1e-3c0e-4d8e-8a51-2f0c7f1b5a02&instance=9b2f6c1e-3c0e-4d8e-8a51-2f0c7f1b5a03',
     400, 'cyb.request.invalid_query'),
    ('?arqs=', 400, 'cyb.request.invalid_query'),
    ('?arqs=not-a-uuid', 404, 'cyb.arq.not_found'),
    ('?instance=not-a-uuid', 400, 'cyb.request.invalid_uuid'),
    ('?instances=x', 400, 'cyb.request.invalid_query'),
    ('?arqs=9b2f6c1e-3c0e-4d8e-8a51-2f0c7f1b5a04', 404, 'cyb.arq.not_found'),
])
def test_delete_bad_queries(database, client, dp, query, status, code):
    create(client)
    before = snapshot(database)
    r = client.delete(URL + query)
    assert r.status_code == status
    assert r.json()['error_code'] == code
    assert snapshot(database) == before


def test_delete_by_arqs_all_or_nothing(database, client, seed, dp):
    a, b = create(client)[0]['uuid'], create(client)[0]['uuid']
    before = snapshot(database)
    assert client.delete(f'{URL}?arqs={a},{uuid.uuid4()}').status_code == 404
    assert snapshot(database) == before
    assert client.patch(URL, json={a: bind_ops(seed, str(uuid.uuid4()))}).status_code == 202
    assert client.delete(f'{URL}?arqs={a},{b}').status_code == 204
    assert client.get(URL).json() == {'arqs': []}
    with database.reader() as s:
        from steward.db import models as m
        assert s.query(m.AttachHandle).filter_by(in_use=True).count() == 0


def test_delete_by_instance_needs_service_token(database, client, seed, dp):
    arq = create(client, headers=MEMBER)[0]['uuid']
    inst = str(uuid.uuid4())
    assert client.patch(URL, json={arq: bind_ops(seed, inst)}).status_code == 202
    before = snapshot(database)
    r = client.delete(f'{URL}?instance={inst}', headers=MEMBER)
    assert r.status_code == 403
    assert r.json()['error_code'] == 'cyb.auth.service_token_required'
    # A bound ARQ needs the service token by uuid too.
    r = client.delete(f'{URL}/{arq}', headers=MEMBER)
    assert r.status_code == 403
    assert snapshot(database) == before
    r = client.delete(f'{URL}?instance={inst}', headers=MEMBER_SERVICE)
    assert r.status_code == 204
    assert client.get(URL).json() == {'arqs': []}


def test_member_deletes_own_unbound_arq(client, dp):
    arq = create(client, headers=MEMBER)[0]['uuid']
    assert client.delete(f'{URL}/{arq}', headers=READER).status_code == 403
    assert client.delete(f'{URL}/{arq}', headers=MEMBER).status_code == 204
    assert client.delete(f'{URL}/{arq}', headers=MEMBER).status_code == 404


def test_no_500s_and_no_tracebacks(client, seed, dp):
    """Upstream defect 1, in one sweep."""
    arq = create(client)[0]['uuid']
    inst = str(uuid.uuid4())
    cases = [
        ('POST', URL, {}), ('GET', f'{URL}?instance={inst}&bind_state=bogus', None),
        ('DELETE', URL, None), ('POST', '/v2/device_profiles', [{'name': 'x'}]),
        ('POST', '/v2/device_profiles', [{'name': 'x', 'groups': []}]),
    ]
    assert client.patch(URL, json={arq: bind_ops(seed, inst)}).status_code == 202
    cases.append(('PATCH', URL, {arq: bind_ops(seed, str(uuid.uuid4()))}))
    for method, url, body in cases:
        r = client.request(method, url, json=body)
        assert 400 <= r.status_code < 500, (method, url, r.text)
        assert 'Traceback' not in r.text and 'File "' not in r.text
        assert set(r.json()) == {'error_message', 'faultstring', 'error_code', 'request_id'}

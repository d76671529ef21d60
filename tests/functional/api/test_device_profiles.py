"""Device profiles."""
import json
import uuid

import pytest

from tests.functional.api.conftest import MEMBER, MEMBER_SERVICE, READER, make_profile, \
    mv, snapshot

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)

DP_FIELDS = {'uuid', 'name', 'description', 'groups', 'created_at', 'updated_at', 'links'}
GOOD_GROUPS = [{'resources:CUSTOM_ACCELERATOR_FPGA': '1',
                'trait:CUSTOM_FPGA_1': 'required',
                'trait:CUSTOM_FUNCTION_ID_3AFB': 'forbidden',
                'accel:bitstream_id': 'a6a12670-7014-4cff-a563-cea949b57fb3'}]


def test_create_get_list_delete(database, client):
    before = snapshot(database)
    r = client.post('/v2/device_profiles', json=[
        {'name': 'afexample_3', 'description': 'device profile description',
         'groups': GOOD_GROUPS}])
    assert r.status_code == 201, r.text
    dp = r.json()
    assert set(dp) == DP_FIELDS            # bare, not wrapped
    assert dp['groups'] == GOOD_GROUPS
    assert dp['links'][0]['href'] == f'http://testserver/v2/device_profiles/{dp["uuid"]}'
    got = client.get(f'/v2/device_profiles/{dp["uuid"]}')
    assert got.status_code == 200
    assert got.json() == {'device_profile': dp}
    assert client.get('/v2/device_profiles').json() == {'device_profiles': [dp]}
    assert client.delete(f'/v2/device_profiles/{dp["uuid"]}').status_code == 204
    assert client.get(f'/v2/device_profiles/{dp["uuid"]}').status_code == 404
    assert snapshot(database) == before


def test_osc_body_with_null_description_and_uuid(client):
    wanted = str(uuid.uuid4())
    r = client.post('/v2/device_profiles', json=[
        {'name': 'dp4', 'description': None, 'uuid': wanted,
         'groups': [{'resources:PGPU': '1'}, {'trait:CUSTOM_GPU': 'required',
                                               'resources:GPU': 2}]}])
    assert r.status_code == 201, r.text
    assert r.json()['uuid'] == wanted and r.json()['description'] is None


def test_spaces_around_names_are_stripped(client):
    dp = make_profile(client, 'spaced', [{'resources: FPGA ': '1',
                                          'trait: CUSTOM_X': 'required'}])
    assert dp['groups'] == [{'resources:FPGA': '1', 'trait:CUSTOM_X': 'required'}]


def test_get_by_name_needs_2_2(client):
    dp = make_profile(client, 'byname')
    r = client.get('/v2/device_profiles/byname')
    assert r.status_code == 406
    assert r.json()['error_code'] == 'cyb.microversion.feature_unavailable'
    assert '2.2' in r.json()['error_message']
    r = client.get('/v2/device_profiles/byname', headers=mv('2.1'))
    assert r.status_code == 406
    for version in ('2.2', '2.3', 'latest'):
        r = client.get('/v2/device_profiles/byname', headers=mv(version))
        assert r.status_code == 200
        assert r.json() == {'device_profile': dp}
    r = client.get('/v2/device_profiles/nosuch', headers=mv('2.2'))
    assert r.status_code == 404
    assert r.json()['error_message'] == 'Device Profile not found with name=nosuch'


def test_list_name_filter(client):
    for name in ('a1', 'b1', 'c1'):
        make_profile(client, name)
    names = lambda q: [d['name'] for d in client.get(  # noqa: E731
        f'/v2/device_profiles{q}').json()['device_profiles']]
    assert names('') == ['a1', 'b1', 'c1']
    assert names('?name=b1') == ['b1']
    assert names('?name=a1,c1') == ['a1', 'c1']
    assert names('?name=zz') == []
    assert client.get('/v2/device_profiles?name=').status_code == 400
    assert client.get('/v2/device_profiles?names=a1').status_code == 400


@pytest.mark.parametrize('body,code', [
    ({'name': 'x', 'groups': [{'resources:FPGA': '1'}]}, 'cyb.device_profile.invalid'),
    ([], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1'}]},
      {'name': 'y', 'groups': [{'resources:FPGA': '1'}]}], 'cyb.device_profile.invalid'),
    ('dp', 'cyb.device_profile.invalid'),
    ([{'name': 'x'}], 'cyb.request.schema'),
    ([{'name': 'x', 'groups': []}], 'cyb.request.schema'),
    ([{'name': 'x', 'groups': {}}], 'cyb.request.schema'),
    ([{'name': 'x', 'groups': ['resources:FPGA=1']}], 'cyb.request.schema'),
    ([{'name': 'x', 'groups': [{}]}], 'cyb.request.schema'),
    ([{'groups': [{'resources:FPGA': '1'}]}], 'cyb.request.schema'),
    ([{'name': '', 'groups': [{'resources:FPGA': '1'}]}], 'cyb.request.schema'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1'}], 'device_profile_group_id': 7}],
     'cyb.request.schema'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1'}], 'uuid': 'nope'}],
     'cyb.request.schema'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': ['1']}]}], 'cyb.request.schema'),
    ([{'name': 'bad name', 'groups': [{'resources:FPGA': '1'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'bad\n', 'groups': [{'resources:FPGA': '1'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resource:FPGA': '1'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'FPGA': '1'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:': '1'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1',
                                'trait:OWNER_CYBORG': 'required'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1', 'trait:CUSTOM_X': 'maybe'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:VCPU': '1'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': 'one'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '0'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': -1}]}], 'cyb.device_profile.invalid'),
    # More accelerators than profile_db.MAX_ACCELERATORS (256), alone or together.
    ([{'name': 'x', 'groups': [{'resources:FPGA': '257'}]}], 'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': str(2 ** 31)}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': 200}, {'resources:GPU': '50',
                                                          'resources:VGPU': '7'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1', 'resources: FPGA': '2'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'trait:CUSTOM_X': 'required'}]}],
     'cyb.device_profile.invalid'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1', 'accel:function_id': 3}]}],
     'cyb.device_profile.invalid'),
])
def test_bad_bodies_are_400_and_change_nothing(database, client, body, code):
    before = snapshot(database)
    r = client.post('/v2/device_profiles', json=body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err['error_code'] == code
    assert err['error_message'] == err['faultstring']
    assert 'Traceback' not in r.text and '/work/' not in r.text
    assert snapshot(database) == before


def test_up_to_256_accelerators_together(client):
    r = client.post('/v2/device_profiles', json=[{'name': 'wide', 'groups': [
        {'resources:FPGA': '200'}, {'resources:GPU': 50, 'resources:VGPU': '6'}]}])
    assert r.status_code == 201, r.text
    r = client.post('/v2/device_profiles', json=[{'name': 'wider', 'groups': [
        {'resources:FPGA': '200'}, {'resources:GPU': 50, 'resources:VGPU': '7'}]}])
    assert r.status_code == 400
    assert r.json()['error_message'] == ('Invalid device profile: the groups ask for '
                                         '257 accelerators together, more than 256')


def test_messages_are_helpful(client):
    r = client.post('/v2/device_profiles', json={'name': 'x', 'groups': []})
    assert r.json()['error_message'] == ('Invalid device profile: Only one device profile '
                                         'allowed per POST request for now.')
    r = client.post('/v2/device_profiles', json=[{'name': 'x', 'groups': [
        {'resources:FPGA': '1'}], 'device_profile_group_id': 7}])
    assert 'device_profile_group_id' in r.json()['error_message']
    r = client.post('/v2/device_profiles', json=[{'name': 'x', 'groups': [
        {'resources:FPGA': '1', 'trait:OWNER_CYBORG': 'required'}]}])
    assert 'CUSTOM_' in r.json()['error_message']


@pytest.mark.parametrize('raw', [b'', b'[{', b'not json', b'\xff\xfe'])
def test_malformed_or_missing_body(client, raw):
    r = client.post('/v2/device_profiles', content=raw,
                    headers={'Content-Type': 'application/json'})
    assert r.status_code == 400
    if raw:
        assert r.json()['error_message'] == 'Request is not in valid JSON format.'
        assert r.json()['error_code'] == 'cyb.request.malformed_json'


def test_duplicates_are_409(database, client):
    dp = make_profile(client, 'dup')
    before = snapshot(database)
    r = client.post('/v2/device_profiles', json=[{'name': 'dup', 'groups': [
        {'resources:FPGA': '2'}]}])
    assert r.status_code == 409
    assert r.json()['error_code'] == 'cyb.device_profile.duplicate_name'
    assert r.json()['error_message'] == 'A device profile named dup already exists.'
    r = client.post('/v2/device_profiles', json=[{'name': 'other', 'uuid': dp['uuid'],
                                                  'groups': [{'resources:FPGA': '2'}]}])
    assert r.status_code == 409
    assert snapshot(database) == before


def test_delete_by_name_and_value(client):
    for name in ('d1', 'd2', 'd3', 'd4'):
        make_profile(client, name)
    assert client.delete('/v2/device_profiles/d1').status_code == 204
    assert client.delete('/v2/device_profiles/d2,d3').status_code == 204
    assert client.delete('/v2/device_profiles?value=d4').status_code == 204
    assert client.get('/v2/device_profiles').json() == {'device_profiles': []}


def test_delete_errors_change_nothing(database, client):
    make_profile(client, 'keep1')
    make_profile(client, 'keep2')
    before = snapshot(database)
    r = client.delete('/v2/device_profiles?value=keep1,missing')
    assert r.status_code == 404
    assert client.delete('/v2/device_profiles/keep2,missing').status_code == 404
    assert client.delete(f'/v2/device_profiles/{uuid.uuid4()}').status_code == 404
    r = client.delete('/v2/device_profiles')
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_query'
    assert client.delete('/v2/device_profiles?value=').status_code == 400
    assert snapshot(database) == before


def test_delete_profile_in_use_is_409(database, client):
    """Upstream defect 9: deleting a used profile orphaned its ARQs."""
    dp = make_profile(client, 'used')
    assert client.post('/v2/accelerator_requests',
                       json={'device_profile_name': 'used'}).status_code == 201
    before = snapshot(database)
    for url in (f'/v2/device_profiles/{dp["uuid"]}', '/v2/device_profiles/used',
                '/v2/device_profiles?value=used'):
        r = client.delete(url)
        assert r.status_code == 409
        assert r.json()['error_code'] == 'cyb.device_profile.in_use'
    assert snapshot(database) == before
    assert client.get('/v2/accelerator_requests').status_code == 200


def test_policy(database, client):
    dp = make_profile(client, 'pol')
    before = snapshot(database)
    for who in (READER, MEMBER, MEMBER_SERVICE):
        r = client.post('/v2/device_profiles', headers=who,
                        json=[{'name': 'nope', 'groups': [{'resources:FPGA': '1'}]}])
        assert r.status_code == 403
        assert r.json()['error_message'] == \
            'Access was denied to the following resource: cyborg:device_profile:create'
        assert client.delete(f'/v2/device_profiles/{dp["uuid"]}',
                             headers=who).status_code == 403
        # Readers may look.
        assert client.get('/v2/device_profiles?name=pol', headers=who).status_code == 200
        assert client.get(f'/v2/device_profiles/{dp["uuid"]}',
                          headers=who).status_code == 200
    assert client.get('/v2/device_profiles', headers={'X-Roles': ''}).status_code == 403
    assert snapshot(database) == before


def test_stored_profile_json(database, client):
    from steward.db import models as m
    make_profile(client, 'stored', [{'resources:FPGA': '1'}])
    with database.reader() as s:
        row = s.query(m.DeviceProfile).filter_by(name='stored').one()
        assert json.loads(row.profile_json) == {'groups': [{'resources:FPGA': '1'}]}


def test_names_differing_in_case_are_two_profiles(client):
    """Byte-for-byte names on every database (MariaDB's default collation ignores
    case: migration 0008)."""
    make_profile(client, 'case-dp')
    make_profile(client, 'CASE-DP')        # 201, not 409
    r = client.get('/v2/device_profiles', params={'name': 'CASE-DP'})
    assert [p['name'] for p in r.json()['device_profiles']] == ['CASE-DP']


@pytest.mark.parametrize('method', ['GET', 'DELETE'])
def test_a_nul_in_the_path_names_no_profile(client, method):
    """PostgreSQL refuses a NUL in a query (the fuzz found a 500): no stored
    resource has one in its name, so the route does not match."""
    r = client.request(method, '/v2/device_profiles/%00')
    assert r.status_code == 404, r.text
    assert r.json()['error_code'] == 'cyb.request.path_not_found', r.text

"""Devices, deployables and attributes."""
import json
import re
import uuid

import pytest

from tests.functional.api.conftest import ADMIN, MANAGER, MEMBER, READER, mv, snapshot

DEVICE_FIELDS = {'uuid', 'type', 'vendor', 'model', 'std_board_info',
                 'vendor_board_info', 'hostname', 'created_at', 'updated_at', 'links'}
DEPLOYABLE_FIELDS = {'uuid', 'parent_id', 'root_id', 'name', 'num_accelerators',
                     'device_id', 'attributes_list', 'rp_uuid', 'driver_name',
                     'bitstream_id', 'created_at', 'updated_at', 'links'}
ATTRIBUTE_FIELDS = {'uuid', 'deployable_id', 'key', 'value', 'created_at',
                    'updated_at', 'links'}
MISSING = str(uuid.uuid4())


# --- devices ----------------------------------------------------------------------
def test_device_list_and_get(client, seed):
    devices = client.get('/v2/devices').json()['devices']
    assert len(devices) == 1
    dev = devices[0]
    assert set(dev) == DEVICE_FIELDS
    assert dev['uuid'] == seed['device'] and dev['type'] == 'FPGA'
    assert dev['created_at'].endswith('+00:00') and 'T' in dev['created_at']
    assert dev['links'][0]['href'] == f'http://testserver/v2/devices/{seed["device"]}'
    one = client.get(f'/v2/devices/{seed["device"]}', headers=mv('2.3')).json()
    assert set(one) == DEVICE_FIELDS | {'status'}


@pytest.mark.parametrize('query,count', [
    ('type=FPGA', 1), ('type=GPU', 0), ('vendor=0xABCD', 1), ('hostname=host-a', 1),
    ('hostname=host-b', 0), ('type=FPGA&hostname=host-a', 1), ('model=x', 0),
    ('status=enabled', 1), ('id=1', 1),
    # A value no device can have filters to nothing, as upstream's unknown type.
    ('type=fake_type', 0), ('type=fpga', 0), ('status=bogus', 0),
    ('device_state=bogus', 0), ('device_state=available', 1), ('id=99999999999999999999', 0),
    ('vendor=a%00b', 0), ('status=', 0),
    # Upstream ignores its own parameters when empty (``if type:``).
    ('type=', 1), ('vendor=', 1), ('hostname=', 1), ('type=&vendor=0xABCD', 1),
])
def test_device_filters(client, query, count):
    r = client.get(f'/v2/devices?{query}',
                   headers={'OpenStack-API-Version': 'accelerator latest'})
    assert r.status_code == 200
    assert len(r.json()['devices']) == count


@pytest.mark.parametrize('query', ['typo=FPGA', 'id=x', 'type=FPGA&type=GPU'])
def test_device_bad_filters(client, query):
    r = client.get(f'/v2/devices?{query}')
    assert r.status_code == 400
    assert r.json()['error_code'] in ('cyb.request.invalid_query',
                                      'cyb.request.invalid_parameter')


def test_device_get_errors(client):
    r = client.get(f'/v2/devices/{MISSING}')
    assert r.status_code == 404
    assert r.json()['error_message'] == f'Device not found with uuid={MISSING}'
    assert r.json()['error_code'] == 'cyb.device.not_found'
    # Upstream looks the segment up as it is: 404, not a UUID check's 400.
    r = client.get('/v2/devices/not-a-uuid')
    assert r.status_code == 404
    assert r.json()['error_message'] == 'Device not found with uuid=not-a-uuid'
    assert r.json()['error_code'] == 'cyb.device.not_found'


def test_device_disable_enable(database, client, seed, placement):
    before = snapshot(database)
    url = f'/v2/devices/{seed["device"]}'
    r = client.post(url + '/disable')
    assert (r.status_code, r.content) == (200, b'')
    assert client.get(url, headers=mv('2.3')).json()['status'] == 'maintaining'
    assert placement.calls == [(seed['rp'], 'FPGA', 16)]
    r = client.post(url + '/enable')
    assert (r.status_code, r.content) == (200, b'')
    assert client.get(url, headers=mv('2.3')).json()['status'] == 'enabled'
    assert placement.calls[-1] == (seed['rp'], 'FPGA', 0)
    assert snapshot(database)['devices'] == before['devices']


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_listings_and_shows_agree_on_timestamps(client, seed, placement):
    """Listings read rows untyped (SQLite's stored text), shows read datetimes: both
    print the same ISO 8601 instants, on both databases."""
    url = f'/v2/devices/{seed["device"]}'
    assert client.post(url + '/disable').status_code == 200     # sets updated_at
    latest = mv('latest')
    shown = client.get(url, headers=latest).json()
    listed = client.get('/v2/devices', headers=latest).json()['devices']
    assert listed == [shown]
    for stamp in (shown['created_at'], shown['updated_at']):
        assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00', stamp), stamp
    assert shown['updated_at'] >= shown['created_at']
    dep = client.get(f'/v2/deployables/{seed["deployable"]}').json()
    assert client.get('/v2/deployables').json()['deployables'] == [dep]
    assert dep['created_at'] == shown['created_at'][:11] + dep['created_at'][11:]


def test_device_enable_errors(database, client, seed):
    assert client.post(f'/v2/devices/{MISSING}/enable').status_code == 404
    assert client.post('/v2/devices/nope/enable').status_code == 400
    before = snapshot(database)
    for who in (MEMBER, READER, MANAGER):
        r = client.post(f'/v2/devices/{seed["device"]}/disable', headers=who)
        assert r.status_code == 403
        assert r.json()['error_message'] == \
            'Access was denied to the following resource: cyborg:device:disable'
    assert snapshot(database) == before


def test_device_reads_need_a_manager(client, seed):
    """Upstream defect 6: device reads were open to anybody. Upstream's fix, kept
    rule for rule: a project's manager (capacity planning) or the admin."""
    for who in (MEMBER, READER, {'X-Roles': ''}, {'X-Project-Id': 'p'}):
        assert client.get('/v2/devices', headers=who).status_code == 403
        assert client.get(f'/v2/devices/{seed["device"]}', headers=who).status_code == 403
        assert client.get('/v2/deployables', headers=who).status_code == 403
        assert client.get('/v2/attributes', headers=who).status_code == 403
    for who in (ADMIN, MANAGER):
        assert client.get('/v2/devices', headers=who).status_code == 200
        assert client.get('/v2/deployables', headers=who).status_code == 200
        assert client.get('/v2/attributes', headers=who).status_code == 200
    # Erase records and history stay with the cloud operator.
    for path in ('erase_records', 'history'):
        r = client.get(f'/v2/devices/{seed["device"]}/{path}',
                       headers={**MANAGER, 'OpenStack-API-Version': 'accelerator latest'})
        assert r.status_code == 403


# --- deployables ------------------------------------------------------------------
def test_deployable_list_and_get(client, seed):
    deps = client.get('/v2/deployables').json()['deployables']
    assert len(deps) == 1
    dep = deps[0]
    assert set(dep) == DEPLOYABLE_FIELDS
    assert isinstance(dep['attributes_list'], str)
    assert json.loads(dep['attributes_list']) == [{'rc': 'FPGA'},
                                                  {'trait0': 'CUSTOM_FAKE_DEVICE'}]
    assert dep['num_accelerators'] == 16 and dep['device_id'] == seed['device_id']
    assert [link['rel'] for link in dep['links']] == ['self', 'bookmark']
    assert dep['links'][1]['href'] == f'http://testserver/deployables/{seed["deployable"]}'
    assert client.get(f'/v2/deployables/{seed["deployable"]}').json() == dep


@pytest.mark.parametrize('query,count', [
    ('name=host-a_FakeDevice', 1), ('name=x', 0), ('num_accelerators=16', 1),
    ('device_id=1', 1), ('driver_name=fake', 1)])
def test_deployable_filters(client, query, count):
    assert len(client.get(f'/v2/deployables?{query}').json()['deployables']) == count


def test_deployable_get_errors(client):
    r = client.get('/v2/deployables/not-a-uuid')
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_uuid'
    r = client.get(f'/v2/deployables/{MISSING}')
    assert r.status_code == 404 and r.json()['error_code'] == 'cyb.deployable.not_found'
    assert client.get('/v2/deployables?num_accelerators=many').status_code == 400


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_integer_filters_beyond_the_column_match_nothing(client, seed):
    """Every integer filter compares an INTEGER column: a value beyond its 32 bits
    matches nothing on every database, as one beyond 64 bits does (PostgreSQL
    answered a 500, "integer out of range", found by test_fuzz.py)."""
    for url in ('/v2/deployables?num_accelerators=2147483648',
                '/v2/deployables?device_id=-2147483649',
                '/v2/deployables?parent_id=9223372036854775808',
                '/v2/deployables?root_id=18446744073709551616',
                '/v2/devices?id=2147483648',
                '/v2/attributes?deployable_id=2147483648',
                '/v2/deployables?num_accelerators=2147483647',
                '/v2/devices?id=-2147483648'):
        r = client.get(url)
        assert r.status_code == 200, (url, r.text)
        assert list(r.json().values()) == [[]], url
    # The column's own values still match.
    r = client.get(f'/v2/deployables?device_id={seed["device_id"]}&num_accelerators=16')
    assert len(r.json()['deployables']) == 1


PROGRAM = [{'op': 'replace', 'path': '/program',
            'value': [{'image_uuid': str(uuid.uuid4())}]}]


@pytest.mark.parametrize('suffix', ['/program', '/program/{uuid}'])
def test_program_answers_not_programmable(client, seed, suffix):
    url = f'/v2/deployables/{seed["deployable"]}' + suffix.format(uuid=seed['deployable'])
    r = client.patch(url, json=PROGRAM)
    assert r.status_code == 400
    assert r.json()['error_code'] == 'cyb.deployable.not_programmable'


@pytest.mark.parametrize('body', [
    {}, [], PROGRAM * 2, [{'op': 'add', 'path': '/program', 'value': PROGRAM[0]['value']}],
    [{'op': 'replace', 'path': '/program', 'value': [{'image_uuid': 'nope'}]}],
    [{'op': 'replace', 'path': '/program', 'value': [{'image_uuid': str(uuid.uuid4()),
                                                      'extra': 1}]}],
])
def test_program_bad_bodies(client, seed, body):
    r = client.patch(f'/v2/deployables/{seed["deployable"]}/program', json=body)
    assert r.status_code == 400
    assert r.json()['error_code'] == 'cyb.request.schema'


def test_program_errors(client, seed):
    dep = seed['deployable']
    assert client.patch(f'/v2/deployables/{dep}/program/{MISSING}',
                        json=PROGRAM).status_code == 400
    r = client.patch(f'/v2/deployables/{MISSING}/program', json=PROGRAM)
    assert r.status_code == 404
    assert client.patch(f'/v2/deployables/{dep}/program', content=b'{',
                        headers={'Content-Type': 'application/json'}).status_code == 400
    r = client.patch(f'/v2/deployables/{dep}/program', json=PROGRAM, headers=MANAGER)
    assert r.status_code == 403


# --- attributes -------------------------------------------------------------------
def test_attribute_lifecycle(database, client, seed):
    before = snapshot(database)
    attrs = client.get('/v2/attributes').json()['attributes']
    assert len(attrs) == 2 and set(attrs[0]) == ATTRIBUTE_FIELDS
    assert client.get(f'/v2/attributes?deployable_id={seed["deployable_id"]}&key=rc'
                      ).json()['attributes'][0]['value'] == 'FPGA'
    bare = {'deployable_id': seed['deployable_id'], 'key': 'k1', 'value': 'v1'}
    r = client.post('/v2/attributes', json=bare)
    assert r.status_code == 201, r.text
    a1 = r.json()
    assert set(a1) == ATTRIBUTE_FIELDS and a1['key'] == 'k1'
    r = client.post('/v2/attributes', json={'attribute': dict(bare, key='k2',
                                                              deployable_id='1')})
    assert r.status_code == 201, r.text
    a2 = r.json()
    assert client.get(f'/v2/attributes/{a1["uuid"]}').json() == a1
    assert client.delete(f'/v2/attributes/{a1["uuid"]}').status_code == 204
    assert client.delete(f'/v2/attributes/{a2["uuid"]}').status_code == 204
    assert client.get(f'/v2/attributes/{a1["uuid"]}').status_code == 404
    assert snapshot(database) == before


@pytest.mark.parametrize('body', [
    {}, [], {'deployable_id': 1, 'key': 'k'},
    {'deployable_id': 1, 'key': 'k', 'value': 'v', 'extra': 1},
    {'deployable_id': 'x', 'key': 'k', 'value': 'v'},
    {'deployable_id': 0, 'key': 'k', 'value': 'v'},
    {'deployable_id': 1, 'key': '', 'value': 'v'},
    {'deployable_id': 1, 'key': 'k', 'value': 3},
    {'attribute': {'deployable_id': 1}},
])
def test_attribute_bad_bodies(database, client, body):
    before = snapshot(database)
    r = client.post('/v2/attributes', json=body)
    assert r.status_code == 400, r.text
    assert r.json()['error_code'] == 'cyb.request.schema'
    assert snapshot(database) == before


def test_attribute_errors(database, client, seed):
    before = snapshot(database)
    r = client.post('/v2/attributes', json={'deployable_id': 999, 'key': 'k', 'value': 'v'})
    assert r.status_code == 404
    assert client.get('/v2/attributes/nope').status_code == 400
    assert client.delete('/v2/attributes/nope').status_code == 404     # as upstream
    assert client.delete(f'/v2/attributes/{MISSING}').status_code == 404
    r = client.post('/v2/attributes', headers=MANAGER,
                    json={'deployable_id': seed['deployable_id'], 'key': 'k', 'value': 'v'})
    assert r.status_code == 403
    attr = client.get('/v2/attributes').json()['attributes'][0]
    r = client.delete(f'/v2/attributes/{attr["uuid"]}', headers=MANAGER)
    assert r.status_code == 403
    assert client.get(f'/v2/attributes/{attr["uuid"]}', headers=MANAGER).status_code == 200
    assert snapshot(database) == before


@pytest.mark.parametrize('query,count', [
    ('key=rc', 1), ('key=bogus', 0), ('deployable_id=99999999999999999999', 0),
    ('key=a%00b', 0), ('value=', 0),
    ('key=', 2),        # upstream: ``if key:``
])
def test_attribute_filters(client, query, count):
    r = client.get(f'/v2/attributes?{query}')
    assert r.status_code == 200, r.text
    assert len(r.json()['attributes']) == count

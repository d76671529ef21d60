"""Random requests to every route of the route table: never a 5xx, and a refused
request changes nothing.

Hypothesis drives each (URL, method) of steward/api/app.py ``ROUTES`` with random
path segments (the seeded objects' ids, other UUIDs, any text), query strings
(known parameter names and others, any values: unknown enum values, huge
integers, NUL characters, ...), bodies (shaped like the real ones with random
leaves, any JSON, documents nested past the decoder's limit or thousands of
members wide, other encodings, bytes that are not JSON), identities and microversions (valid,
out of range, junk), against the in-process app on a seeded database. Every
answer must be below 500, and when it is a 4xx the database must be as before
(tests/functional/api/conftest.py ``snapshot``). The route list is the table
itself: a new route is fuzzed without touching this file.

On PostgreSQL too: it refuses what SQLite takes (a NUL in a string).
"""
import json
import urllib.parse
import uuid

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from steward.api import app as api_app
from steward.api.handlers import attributes
from steward.api.handlers import deployables
from steward.api.handlers import devices
from tests.functional.api.conftest import snapshot

ROUTE_METHODS = [(path, method) for path, methods in api_app.ROUTES.items()
                 for method in methods]

# Every query parameter some handler reads, plus names none does.
PARAM_NAMES = ['uuid', 'id', 'type', 'vendor', 'model', 'hostname', 'status',
               'device_state', 'name', 'num_accelerators', 'device_id', 'rp_uuid',
               'driver_name', 'parent_id', 'root_id', 'deployable_id', 'key', 'value',
               'instance', 'bind_state', 'arqs', 'limit', 'filters', 'marker']
WORDS = ['FPGA', 'GPU', 'NVME', 'fake_type', 'bogus', 'enabled', 'maintaining',
         'available', 'error', 'resolved', 'Bound', 'Initial', 'host-a', '0xABCD',
         'dp1', '', ' ', ',', ',,', '%', '\x00', 'a\x00b', 'é', '🙂', '-1', '0',
         str(2 ** 63), str(2 ** 64), '1e3', 'null', 'true', '[]', '{}']
# The parameters each URL reads: most generated queries use only these, so that
# they get past the unknown-parameter check to the filters and the database.
ROUTE_PARAMS = {
    '/v2/devices': devices.FILTERS_2_8,
    '/v2/deployables': deployables.FILTERS,
    '/v2/attributes': attributes.FILTERS,
    '/v2/device_profiles': ('name', 'value'),
    '/v2/accelerator_requests': ('instance', 'bind_state', 'arqs'),
    '/v2/devices/{uuid}/erase_records': ('limit',),
}
VERSIONS = ['2.0', '2.1', '2.2', '2.3', '2.4', '2.5', '2.6', '2.7', '2.8', '2.9', '2.10', '2.99', '3.0',
            '1.0', 'latest', '2', 'abc', '2.-1', '']


def _text():
    return st.one_of(st.sampled_from(WORDS), st.text(max_size=40),
                     st.text(min_size=250, max_size=300, alphabet='ab'))


def _value(ids):
    return st.one_of(st.sampled_from(WORDS), _text(), st.sampled_from(list(ids.values())).map(str),
                     st.uuids().map(str), st.integers().map(str),
                     st.lists(st.sampled_from(list(ids.values())).map(str),
                              min_size=1, max_size=3).map(','.join))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text(), inner,
                                                                 max_size=4),
    max_leaves=12)


def _shaped(ids):
    """Bodies shaped like the real ones, with random leaves."""
    leaf = st.one_of(_value(ids), _json)
    op = st.fixed_dictionaries({
        'op': st.one_of(st.sampled_from(['add', 'remove', 'replace']), leaf),
        'path': st.one_of(st.sampled_from(['/hostname', '/device_rp_uuid',
                                           '/instance_uuid', '/project_id',
                                           '/program']), leaf),
    }, optional={'value': st.one_of(leaf, st.just([{'image_uuid': str(uuid.uuid4())}]))})
    group = st.dictionaries(st.one_of(st.sampled_from(
        ['resources:FPGA', 'resources:CUSTOM_X', 'trait:CUSTOM_A', 'accel:bitstream_id',
         'bogus']), _text()), leaf, max_size=3)
    return st.one_of(
        st.lists(st.fixed_dictionaries(
            {'name': leaf, 'groups': st.one_of(st.lists(group, max_size=2), leaf)},
            optional={'description': leaf, 'uuid': leaf}), max_size=2),
        st.fixed_dictionaries({'device_profile_name': leaf},
                              optional={'device_profile_group_id': leaf}),
        st.dictionaries(st.one_of(st.just(ids['arq']), st.uuids().map(str), _text()),
                        st.lists(op, max_size=4), max_size=2),
        st.lists(op, max_size=2),
        st.fixed_dictionaries({'deployable_id': leaf, 'key': leaf, 'value': leaf}))


def _nest(depth, leaf, as_dict):
    """``leaf`` inside ``depth`` arrays or objects, written without recursion
    (json.dumps itself would overflow on the deepest)."""
    if as_dict:
        return b'{"a":' * depth + leaf + b'}' * depth
    return b'[' * depth + leaf + b']' * depth


def _deep(ids):
    """Documents nested from a few levels to far past the decoder's limit, a real
    body's shape at the bottom or a random document."""
    leaf = st.one_of(_shaped(ids), _json).map(lambda b: json.dumps(b).encode())
    return st.builds(_nest, st.one_of(st.integers(1, 40), st.integers(900, 1100),
                                      st.integers(1, 20000)),
                     leaf, st.booleans())


def _wide(ids):
    """Many members: long arrays, many keys, long strings and numbers."""
    item = st.one_of(_shaped(ids), _json)
    return st.one_of(
        st.builds(lambda n, x: json.dumps([x] * n).encode(), st.integers(100, 5000), item),
        st.builds(lambda n, x: json.dumps({f'k{i}': x for i in range(n)}).encode(),
                  st.integers(100, 3000), item),
        st.builds(lambda n: b'{"device_profile_name": "' + b'x' * n + b'"}',
                  st.integers(1000, 100000)),
        st.builds(lambda n: b'{"device_profile_name": ' + b'7' * n + b'}',
                  st.integers(1000, 6000)))


def _body(ids):
    return st.one_of(
        st.none(),
        _shaped(ids).map(lambda b: json.dumps(b).encode()),
        _json.map(lambda b: json.dumps(b).encode()),
        _deep(ids), _wide(ids),
        # Other encodings of a real body's shape.
        st.tuples(_shaped(ids), st.sampled_from(['utf-16', 'utf-32', 'utf-8-sig',
                                                 'latin-1'])).map(
            lambda t: json.dumps(t[0], ensure_ascii=False).encode(t[1], 'replace')),
        st.binary(max_size=64))


def _identity():
    roles = st.lists(st.sampled_from(['admin', 'member', 'reader', 'manager', 'service',
                                      'bogus', '']), max_size=4, unique=True)
    admin = st.just({})         # noauth: the admin and a service
    # Mostly the admin, who gets past policy to the handlers.
    return st.one_of(
        admin, admin, admin,
        st.fixed_dictionaries(
            {'X-Roles': roles.map(','.join)},
            optional={'X-Project-Id': st.sampled_from(['p-member', 'p-other', '', 'é']),
                      'X-User-Id': st.sampled_from(['u1', '']),
                      'X-Service-Roles': st.sampled_from(['service', '', 'reader'])}))


def _headers():
    version = st.one_of(st.sampled_from(VERSIONS).map(lambda v: f'accelerator {v}'),
                        st.sampled_from(VERSIONS), st.text(max_size=20))
    return st.tuples(_identity(), st.one_of(st.none(), version),
                     # Mostly JSON's: the others are refused (415) before the body
                     # is read.
                     st.sampled_from([None, 'text/plain', 'bogus']
                                     + ['application/json'] * 5))


def _request(ids, path):
    segment = st.one_of(st.sampled_from(list(ids.values())).map(str), st.uuids().map(str),
                        _text().filter(bool))
    segments = {name: segment for name in ('uuid', 'again', 'name_or_uuid')
                if '{' + name + '}' in path}
    own = st.sampled_from(ROUTE_PARAMS.get(path) or PARAM_NAMES)
    name = st.one_of(own, own, own, st.sampled_from(PARAM_NAMES), _text())
    query = st.lists(st.tuples(name, _value(ids)), max_size=3)
    return st.tuples(st.fixed_dictionaries(segments), query, _body(ids), _headers())


def _url(path, segments, query):
    for name, value in segments.items():
        path = path.replace('{' + name + '}', urllib.parse.quote(value, safe=''))
    if query:
        path += '?' + urllib.parse.urlencode(query)
    return path


def _ids(seed, client):
    """The seeded objects, plus a device profile and an ARQ, by every key a path
    could name them with."""
    r = client.post('/v2/device_profiles',
                    json=[{'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}])
    assert r.status_code == 201, r.text
    profile = r.json()['uuid']
    r = client.post('/v2/accelerator_requests', json={'device_profile_name': 'dp1'})
    assert r.status_code == 201, r.text
    attribute = client.get('/v2/attributes').json()['attributes'][0]['uuid']
    return {'device': seed['device'], 'deployable': seed['deployable'],
            'rp': seed['rp'], 'device_id': seed['device_id'], 'profile': profile,
            'profile_name': 'dp1', 'arq': r.json()['arqs'][0]['uuid'],
            'attribute': attribute}


def _check(database, client, path, method, request):
    segments, query, body, (identity, version, content_type) = request
    headers = dict(identity)
    if version is not None:
        headers['OpenStack-API-Version'] = version
    if content_type is not None:
        headers['Content-Type'] = content_type
    # Any bytes a client could put in a header line (UTF-8 included), but no
    # control characters: they would end the line.
    headers = {k: ''.join(c for c in v if c >= ' ').encode() for k, v in headers.items()}
    url = _url(path, segments, query)
    before = snapshot(database)
    r = client.request(method, url, content=body, headers=headers)
    assert r.status_code < 500, (method, url, body, headers, r.status_code, r.text)
    if r.status_code >= 400:
        assert snapshot(database) == before, (method, url, body, headers, r.status_code, r.text)


_SETTINGS = dict(deadline=None, database=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
    HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.mark.parametrize('path,method', ROUTE_METHODS,
                         ids=[f'{m} {p}' for p, m in ROUTE_METHODS])
def test_no_5xx_and_refusals_change_nothing(database, placement, client, seed, path,
                                             method):
    ids = _ids(seed, client)

    @settings(max_examples=40, **_SETTINGS)
    @given(_request(ids, path))
    def run(request):
        _check(database, client, path, method, request)

    run()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_no_5xx_on_postgresql(database, placement, client, seed):
    """PostgreSQL and MariaDB refuse what SQLite stores (a NUL in a string, a
    string longer than its column): every route, fewer examples."""
    ids = _ids(seed, client)

    @settings(max_examples=300, **_SETTINGS)
    @given(st.sampled_from(ROUTE_METHODS).flatmap(
        lambda rm: st.tuples(st.just(rm), _request(ids, rm[0]))))
    def run(case):
        (path, method), request = case
        _check(database, client, path, method, request)

    run()


IMPOSSIBLE = ['fake_type', 'bogus', 'a\x00b', str(2 ** 64), str(-2 ** 63 - 1), 'x' * 300]


@pytest.mark.parametrize('path,name', [(p, n) for p, names in ROUTE_PARAMS.items()
                                       for n in names])
def test_every_filter_with_impossible_values(database, placement, client, seed, path, name):
    """What the random search may miss, every time: each parameter of each URL
    with values no row can hold. Listings answer 200 and nothing (as upstream
    answers an unknown ``?type=``) or a clean 400; never a 5xx, never a change."""
    ids = _ids(seed, client)
    url = path.replace('{uuid}', ids['device'])
    headers = {'OpenStack-API-Version': 'accelerator latest'}
    before = snapshot(database)
    for value in IMPOSSIBLE:
        r = client.get(f'{url}?{urllib.parse.urlencode({name: value})}', headers=headers)
        assert r.status_code in (200, 400), (name, value, r.status_code, r.text)
        if r.status_code == 200:
            listed = next(iter(r.json().values()))
            assert listed == [], (name, value, listed)
        else:
            assert r.json()['error_code'].startswith('cyb.'), r.text
    assert snapshot(database) == before


@pytest.mark.parametrize('path,method', [(p, m) for p, m in ROUTE_METHODS if '{' in p],
                         ids=[f'{m} {p}' for p, m in ROUTE_METHODS if '{' in p])
def test_every_path_segment_with_impossible_values(database, placement, client, seed, path, method):
    """Each path segment of each URL, every method, with what names nothing."""
    _ids(seed, client)
    headers = {'OpenStack-API-Version': 'accelerator latest'}
    before = snapshot(database)
    for value in IMPOSSIBLE + ['not-a-uuid', ' ', '%', 'é']:
        url = path
        for name in ('uuid', 'again', 'name_or_uuid'):
            url = url.replace('{' + name + '}', urllib.parse.quote(value, safe=''))
        r = client.request(method, url, headers=headers, json=None)
        assert 400 <= r.status_code < 500, (method, url, r.status_code, r.text)
    assert snapshot(database) == before

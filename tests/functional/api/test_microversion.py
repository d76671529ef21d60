"""Microversions: the canonical list, negotiation, and the headers of every answer."""
import os
import re

import pytest

from steward.api import microversion
from steward.common import exception
from tests.functional.api.conftest import mv

HEADERS = ('openstack-api-minimum-version', 'openstack-api-maximum-version',
           'openstack-api-version', 'vary', 'x-openstack-request-id')


# --- the list ---------------------------------------------------------------------
def test_versions_are_contiguous_from_2_0():
    versions = [v for v, _ in microversion.VERSIONS]
    assert versions[0] == (2, 0)
    for prev, cur in zip(versions, versions[1:]):
        assert cur == (prev.major, prev.minor + 1)
    assert microversion.MIN_VERSION == versions[0]
    assert microversion.MAX_VERSION == versions[-1]


def test_latest_version_is_2_9():
    # Raise with care: a new microversion also needs its history entry, and
    # The newest entry of the canonical list; a new one must update this test.
    assert microversion.max_version_string() == '2.9'


def test_every_version_has_a_history_entry():
    path = os.path.join(os.path.dirname(microversion.__file__),
                        'rest_api_version_history.rst')
    with open(path) as f:
        titles = re.findall(r'^(\d+\.\d+) \(', f.read(), re.M)
    assert titles == [str(v) for v, _ in microversion.VERSIONS]


def test_feature_constants_are_listed():
    listed = {v for v, _ in microversion.VERSIONS}
    for name in ('INITIAL', 'ARQ_BIND_PROJECT_ID', 'DP_GET_BY_NAME', 'DEVICE_STATUS',
                 'PCI_MANAGED', 'DEVICE_STATE', 'DEVICE_HISTORY', 'NUMA_NODE'):
        assert getattr(microversion, name) in listed


def test_gap_is_refused():
    with pytest.raises(AssertionError):
        microversion._add('2.11', 'a gap')
    assert len(microversion.VERSIONS) == 10


# --- parsing ----------------------------------------------------------------------
@pytest.mark.parametrize('value,expected', [
    (None, (2, 0)),
    ('accelerator 2.1', (2, 1)),
    ('accelerator 2.3', (2, 3)),
    ('accelerator latest', (2, 9)),
    ('ACCELERATOR 2.2', (2, 2)),
    ('2.2', (2, 2)),                         # bare form, deprecated
    ('latest', (2, 9)),
    ('compute 2.60', (2, 0)),                # another service's: not ours
    ('compute 2.60, accelerator 2.3', (2, 3)),
])
def test_parse(value, expected):
    headers = {} if value is None else {'openstack-api-version': value}
    assert microversion.parse(headers) == expected


@pytest.mark.parametrize('value', ['accelerator 2.99', 'accelerator 3.0',
                                   'accelerator 1.0', 'accelerator abc', 'abc', '2.99',
                                   'accelerator 2', 'accelerator 2.1.1', '2.-1'])
def test_parse_unacceptable(value):
    with pytest.raises(exception.NotAcceptable):
        microversion.parse({'openstack-api-version': value})


# --- over HTTP --------------------------------------------------------------------
def _check_headers(r, served):
    for name in HEADERS:
        assert name in r.headers, (name, r.status_code, r.text)
    assert r.headers['openstack-api-minimum-version'] == '2.0'
    assert r.headers['openstack-api-maximum-version'] == microversion.max_version_string()
    assert r.headers['openstack-api-version'] == f'accelerator {served}'
    assert r.headers['vary'] == 'OpenStack-API-Version'
    assert r.headers['x-openstack-request-id'].startswith('req-')


@pytest.mark.parametrize('method,path,status', [
    ('GET', '/v2', 200), ('GET', '/v2/', 200), ('GET', '/v2/devices', 200),
    ('GET', '/devices', 200), ('GET', '/v2/device_profiles', 200),
    ('GET', '/v2/accelerator_requests', 200), ('GET', '/v2/nowhere', 404),
    ('PUT', '/v2/devices', 405), ('GET', '/v2/devices/not-a-uuid', 404),
    ('GET', f'/v2/devices/{"0" * 8}-0000-0000-0000-{"0" * 12}', 404),
    ('POST', '/v2/accelerator_requests', 400),
])
def test_headers_on_every_v2_answer(client, method, path, status):
    for header, served in ((None, '2.0'), ('accelerator 2.2', '2.2'),
                           ('accelerator latest', microversion.max_version_string())):
        r = client.request(method, path,
                           headers={'OpenStack-API-Version': header} if header else {})
        assert r.status_code == status, r.text
        _check_headers(r, served)


@pytest.mark.parametrize('value', ['accelerator 2.99', 'accelerator 3.0', 'abc',
                                   'accelerator abc', '2.10'])
def test_406_is_json_with_headers(client, value):
    r = client.get('/v2/devices', headers={'OpenStack-API-Version': value})
    assert r.status_code == 406
    body = r.json()
    assert body['error_code'] == 'cyb.microversion.not_acceptable'
    assert '2.0' in body['error_message'] and \
        microversion.max_version_string() in body['error_message']
    assert body['faultstring'] == body['error_message']
    assert body['request_id'] == r.headers['x-openstack-request-id']
    _check_headers(r, '2.0')


# --- URLs that appeared in a microversion -------------------------------------
def _versioned_routes():
    from steward.api import app as api_app
    for path, since in api_app.SINCE.items():
        assert path in api_app.ROUTES, path
        for method in api_app.ROUTES[path]:
            yield method, path, since


@pytest.mark.parametrize('method,path,since', list(_versioned_routes()))
def test_url_below_its_microversion_is_404(client, method, path, since):
    url = path.replace('{uuid}', f'{"0" * 8}-0000-0000-0000-{"0" * 12}')
    body = {} if method in ('POST', 'PATCH') else None
    below = [v for v, _ in microversion.VERSIONS if v < since]
    assert below, path
    for version in below:
        r = client.request(method, url, headers=mv(str(version)), json=body)
        assert r.status_code == 404, (version, r.text)
        assert r.json()['error_code'] == 'cyb.request.path_not_found'
        _check_headers(r, str(version))
    # From its version on the URL exists: the device does not (404 of another kind).
    r = client.request(method, url, headers=mv(str(since)), json=body)
    assert r.json()['error_code'] == 'cyb.device.not_found', r.text


def test_versioned_urls_are_the_known_ones():
    from steward.api import app as api_app
    assert api_app.SINCE == {
        '/v2/devices/{uuid}/clean': microversion.DEVICE_STATE,
        '/v2/devices/{uuid}/clean_plan': microversion.DEVICE_STATE,
        '/v2/devices/{uuid}/erase_records': microversion.DEVICE_STATE,
        '/v2/devices/{uuid}/history': microversion.DEVICE_HISTORY,
    }


def test_root_carries_request_id(client):
    r = client.get('/')
    assert r.status_code == 200
    assert r.headers['x-openstack-request-id'].startswith('req-')


def test_bare_version_header_is_served(client):
    r = client.get('/v2/devices', headers={'OpenStack-API-Version': '2.3'})
    assert r.status_code == 200
    assert r.headers['openstack-api-version'] == 'accelerator 2.3'
    assert 'status' in r.json()['devices'][0]


def test_device_status_only_from_2_3(client):
    assert 'status' not in client.get('/v2/devices', headers=mv('2.2')).json()['devices'][0]
    assert client.get('/v2/devices', headers=mv('2.3')).json()['devices'][0]['status'] \
        == 'enabled'

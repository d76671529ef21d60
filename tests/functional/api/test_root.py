"""Version documents and links."""
import pytest

from steward.api import microversion
from steward.conf import CONF


def test_root_document(client):
    r = client.get('/')
    assert r.status_code == 200
    body = r.json()
    assert body['name'] == 'OpenStack Cyborg API'
    assert body['versions'] == [body['default_version']]
    v = body['default_version']
    assert v == {'id': 'v2', 'status': 'CURRENT', 'max_version': microversion.max_version_string(),
                 'min_version': '2.0',
                 'links': [{'href': 'http://testserver/v2', 'rel': 'self'}]}


@pytest.mark.parametrize('path', ['/v2', '/v2/'])
def test_v2_document_self_link_serves_the_api(client, path):
    r = client.get(path)
    assert r.status_code == 200
    doc = r.json()
    assert doc == {'id': 'v2.0', 'status': 'CURRENT', 'max_version': microversion.max_version_string(),
                   'min_version': '2.0',
                   'links': [{'href': 'http://testserver/v2/', 'rel': 'self'}]}
    # keystoneauth follows the self link: it must serve the API.
    href = doc['links'][0]['href']
    assert client.get(href + 'devices').status_code == 200
    assert client.get(href).json() == doc


def test_version_documents_need_no_identity(client):
    headers = {'X-Roles': '', 'X-Project-Id': 'nobody'}
    assert client.get('/', headers=headers).status_code == 200
    assert client.get('/v2', headers=headers).status_code == 200
    assert client.get('/v2/devices', headers=headers).status_code == 403


def test_public_endpoint_builds_links(client, seed):
    CONF.set_override('public_endpoint', 'https://cloud.example/accelerator/', group='api')
    try:
        assert client.get('/v2').json()['links'][0]['href'] == \
            'https://cloud.example/accelerator/v2/'
        dev = client.get('/v2/devices').json()['devices'][0]
        assert dev['links'] == [{
            'href': f'https://cloud.example/accelerator/v2/devices/{seed["device"]}',
            'rel': 'self'}]
        dep = client.get(f'/v2/deployables/{seed["deployable"]}').json()
        assert dep['links'] == [
            {'href': 'https://cloud.example/accelerator/v2/deployables/'
                     f'{seed["deployable"]}', 'rel': 'self'},
            {'href': f'https://cloud.example/accelerator/deployables/{seed["deployable"]}',
             'rel': 'bookmark'}]
    finally:
        CONF.clear_override('public_endpoint', group='api')


def test_links_follow_the_host_header(client):
    r = client.get('/v2', headers={'Host': 'api.example:6666'})
    assert r.json()['links'][0]['href'] == 'http://api.example:6666/v2/'


def test_unversioned_and_trailing_slash_paths(client):
    a = client.get('/v2/devices').json()
    assert client.get('/devices').json() == a
    assert client.get('/v2/devices/').json() == a
    assert client.get('/devices/').json() == a


def test_no_framework_pages(client):
    for path in ('/docs', '/openapi.json', '/redoc'):
        r = client.get(path)
        assert r.status_code == 404
        assert r.headers['content-type'] == 'application/json'

"""Microversion 2.6: last_error, missing and missing_since on devices, and
GET /v2/devices/{uuid}/history (oldest first), on both sides of the line."""
import uuid

import pytest

from steward.common import states
from steward.db import models as m
from steward.db import transitions
from tests.functional.api.conftest import MANAGER, MEMBER, identity, make_profile, mv

NEW_FIELDS = {'last_error', 'missing', 'missing_since'}
HISTORY_FIELDS = {'uuid', 'created_at', 'event', 'source_state', 'target_state',
                  'reason', 'request_id', 'actor'}


def _bind_and_release(client, seed):
    make_profile(client, 'dp1', [{'resources:FPGA': '1'}])
    arq = client.post('/v2/accelerator_requests',
                      json={'device_profile_name': 'dp1'}).json()['arqs'][0]['uuid']
    bound = client.patch('/v2/accelerator_requests', json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert bound.status_code == 202, bound.text
    released = client.delete(f'/v2/accelerator_requests/{arq}')
    assert released.status_code == 204, released.text
    return bound.headers['x-openstack-request-id'], released.headers[
        'x-openstack-request-id']


@pytest.mark.parametrize('version,present', [('2.0', False), ('2.5', False),
                                             ('2.6', True), ('latest', True)])
def test_device_fields_only_from_2_6(client, seed, version, present):
    one = client.get(f'/v2/devices/{seed["device"]}', headers=mv(version)).json()
    listed = client.get('/v2/devices', headers=mv(version)).json()['devices'][0]
    for dev in (one, listed):
        assert (NEW_FIELDS <= set(dev)) is present
        assert not present or (dev['last_error'], dev['missing'], dev['missing_since']) \
            == (None, False, None)


def test_device_fields_show_an_error_and_a_missing_device(database, client, seed):
    with database.writer() as s:
        dev = s.get(m.Device, seed['device_id'])
        transitions.advance(s, m.Device, dev, states.DEV_ERROR, event='fail',
                            reason='cyb.cleanup.verify_failed: block 7 not zero')
        # What the report handler does for a device that vanished while in error.
        dev.missing_since = dev.updated_at
    got = client.get(f'/v2/devices/{seed["device"]}', headers=mv('2.6')).json()
    assert got['device_state'] == 'error' and got['missing'] is True
    assert got['last_error'] == 'cyb.cleanup.verify_failed: block 7 not zero'
    assert got['missing_since'].endswith('+00:00') and 'T' in got['missing_since']


def test_history_oldest_first(client, seed):
    bind_id, release_id = _bind_and_release(client, seed)
    r = client.get(f'/v2/devices/{seed["device"]}/history', headers=mv('2.6'))
    assert r.status_code == 200, r.text
    history = r.json()['history']
    assert [set(h) for h in history] == [HISTORY_FIELDS] * 2
    assert [(h['source_state'], h['event'], h['target_state'], h['request_id'])
            for h in history] == [('available', 'bind', 'allocated', bind_id),
                                  ('allocated', 'release', 'available', release_id)]
    assert all(h['actor'].startswith('conductor ') for h in history)
    assert history[0]['created_at'] <= history[1]['created_at']
    assert r.headers['openstack-api-version'] == 'accelerator 2.6'


def test_history_answers(client, seed):
    url = f'/v2/devices/{seed["device"]}/history'
    for version in ('2.0', '2.5'):
        r = client.get(url, headers=mv(version))
        assert r.status_code == 404, version
        assert r.json()['error_code'] == 'cyb.request.path_not_found'
    r = client.get(f'/v2/devices/{uuid.uuid4()}/history', headers=mv('2.6'))
    assert r.status_code == 404 and r.json()['error_code'] == 'cyb.device.not_found'
    r = client.get('/v2/devices/not-a-uuid/history', headers=mv('2.6'))
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_uuid'
    r = client.get(url + '?limit=1', headers=mv('2.6'))
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.request.invalid_query'
    assert client.post(url, headers=mv('2.6')).status_code == 405
    # Like device reads: the cloud's operator, not a project's manager.
    for who in (MEMBER, MANAGER):
        r = client.get(url, headers=dict(who, **mv('2.6')))
        assert r.status_code == 403 and 'cyborg:device:history' in r.json()['error_message']
    admin = identity(['admin', 'member', 'reader'], project='ops')
    assert client.get(url, headers=dict(admin, **mv('2.6'))).json() == {'history': []}

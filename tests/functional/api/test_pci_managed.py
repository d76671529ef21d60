"""Microversion 2.4: attach_handle_info.managed on bound PCI ARQs, both sides."""
import json
import uuid

import pytest

from steward.db import models as m

URL = '/v2/accelerator_requests'


def pci_deployable(database, stored_managed):
    """A one-function PCI deployable whose handle stored ``managed`` (or none)."""
    rp = str(uuid.uuid4())
    info = {'domain': '0000', 'bus': '25', 'device': '00', 'function': '4'}
    if stored_managed is not None:
        info['managed'] = stored_managed
    with database.writer() as s:
        dev = m.Device(uuid=str(uuid.uuid4()), type='PCI', vendor='10de', model='25b6',
                       hostname='host-a', status='enabled', device_state='available')
        s.add(dev)
        s.flush()
        cpid = m.ControlpathID(uuid=str(uuid.uuid4()), device_id=dev.id, cpid_type='PCI',
                               cpid_info=json.dumps(info))
        dep = m.Deployable(uuid=str(uuid.uuid4()), name=f'host-a_{rp[:8]}',
                           num_accelerators=1, device_id=dev.id, rp_uuid=rp,
                           driver_name='pci')
        s.add_all([cpid, dep])
        s.flush()
        s.add(m.AttachHandle(uuid=str(uuid.uuid4()), deployable_id=dep.id, cpid_id=cpid.id,
                             attach_type='PCI', in_use=False, attach_info=json.dumps(info)))
    return rp


def bound_arq(client, rp):
    client.post('/v2/device_profiles', json=[{'name': f'dp-{rp[:8]}', 'groups': [
        {'resources:CUSTOM_PCI_10DE_25B6': '1'}]}])
    arq = client.post(URL, json={'device_profile_name': f'dp-{rp[:8]}'}).json()['arqs'][0]
    inst = str(uuid.uuid4())
    r = client.patch(URL, json={arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
    assert r.status_code == 202, r.text
    return arq['uuid'], inst


def views(client, arq_uuid, inst, version):
    h = {'OpenStack-API-Version': f'accelerator {version}'}
    return [client.get(f'{URL}/{arq_uuid}', headers=h).json(),
            client.get(URL, headers=h).json()['arqs'][0],
            client.get(URL, params={'instance': inst, 'bind_state': 'resolved'},
                       headers=h).json()['arqs'][0]]


@pytest.mark.parametrize('stored,expected', [(False, False), (True, True), (None, True)])
def test_managed_from_2_4(database, client, placement, stored, expected):
    arq_uuid, inst = bound_arq(client, pci_deployable(database, stored))
    for doc in views(client, arq_uuid, inst, '2.4'):
        assert doc['attach_handle_info']['managed'] is expected
        assert doc['attach_handle_info']['bus'] == '25'
    for doc in views(client, arq_uuid, inst, 'latest'):
        assert doc['attach_handle_info']['managed'] is expected


@pytest.mark.parametrize('stored', [False, None])
def test_no_managed_below_2_4(database, client, placement, stored):
    arq_uuid, inst = bound_arq(client, pci_deployable(database, stored))
    for version in ('2.0', '2.3'):
        for doc in views(client, arq_uuid, inst, version):
            assert set(doc['attach_handle_info']) == {'domain', 'bus', 'device', 'function'}


def test_non_pci_handles_unchanged_at_2_4(client, seed):
    client.post('/v2/device_profiles', json=[{'name': 'f', 'groups': [{'resources:FPGA': '1'}]}])
    arq = client.post(URL, json={'device_profile_name': 'f'}).json()['arqs'][0]
    client.patch(URL, json={arq['uuid']: [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    doc = client.get(f'{URL}/{arq["uuid"]}',
                     headers={'OpenStack-API-Version': 'accelerator 2.4'}).json()
    assert doc['attach_handle_type'] == 'TEST_PCI'
    assert 'managed' not in doc['attach_handle_info']


def test_managed_cannot_be_set_by_a_tenant(database, client, placement):
    rp = pci_deployable(database, False)
    arq_uuid, _ = bound_arq(client, rp)
    r = client.patch(URL, json={arq_uuid: [
        {'op': 'add', 'path': '/attach_handle_info/managed', 'value': True}]},
        headers={'OpenStack-API-Version': 'accelerator 2.4'})
    assert r.status_code == 400

"""Nova's side of a boot and a delete, against a Cluster, step by step as Nova 34
drives Cyborg (shared/reference/cyborg-api.md section 11)."""
import time
import uuid

from tests.multihost import cluster as cluster_mod

TRANSIENT_ARQ_STATES = ('BindStarted', 'Deleting')
TRANSIENT_DEVICE_STATES = ('pending_cleaning', 'cleaning')
PCI_PROFILE = 'mh-pci'


def ensure_profile(api, name=PCI_PROFILE, rc=cluster_mod.PCI_RC, count=1):
    r = api.post('/v2/device_profiles', json=[{'name': name, 'groups': [
        {f'resources:{rc}': str(count)}]}])
    if r.status_code == 409 and r.json()['error_code'] == \
            'cyb.device_profile.duplicate_name':
        return
    assert r.status_code in (200, 201), r.text


def claim(cluster, host, instance, rp_uuid, rc=cluster_mod.PCI_RC):
    """Nova's scheduler claim: the compute node's VCPU and the device."""
    with cluster.placement_client() as p:
        r = p.put(f'/allocations/{instance}', json={
            'allocations': {cluster.compute_rps[host]: {'resources': {'VCPU': 1}},
                            rp_uuid: {'resources': {rc: 1}}},
            'project_id': 'mh-project', 'user_id': 'mh-user',
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text


def unclaim(cluster, instance):
    with cluster.placement_client() as p:
        assert p.delete(f'/allocations/{instance}').status_code in (204, 404)


def bind_body(arqs, host, rp_uuid, instance):
    return {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': host},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                        {'op': 'add', 'path': '/instance_uuid', 'value': instance}]
            for a in arqs}


def boot(cluster, api, host, rp_uuid, profile=PCI_PROFILE, rc=cluster_mod.PCI_RC):
    """Claim, create the ARQ, bind it to ``rp_uuid`` on ``host``, wait until it is
    resolved. Returns (instance uuid, the resolved ARQs)."""
    instance = str(uuid.uuid4())
    claim(cluster, host, instance, rp_uuid, rc=rc)
    r = api.post('/v2/accelerator_requests', json={'device_profile_name': profile})
    assert r.status_code == 201, r.text
    arqs = r.json()['arqs']
    r = api.patch('/v2/accelerator_requests', json=bind_body(arqs, host, rp_uuid,
                                                             instance))
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while True:
        r = api.get('/v2/accelerator_requests', params={'instance': instance,
                                                        'bind_state': 'resolved'})
        if r.status_code == 200:
            return instance, r.json()['arqs']
        assert r.status_code == 423, r.text
        assert time.monotonic() < deadline, 'ARQs never resolved'
        time.sleep(0.1)


def delete(cluster, api, instance):
    """nova-compute's delete, then the scheduler's allocation going away."""
    r = api.delete('/v2/accelerator_requests', params={'instance': instance})
    assert r.status_code == 204, r.text
    unclaim(cluster, instance)


def wait_equal(fetch, expected, timeout=20):
    """``fetch()`` until it equals ``expected`` (a reservation lift or a report is
    asynchronous); returns the last value either way for the assertion."""
    deadline = time.monotonic() + timeout
    while True:
        got = fetch()
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def transient(cluster):
    """ARQs and devices, anywhere in the deployment, in a state with no way out
    but the work that put them there."""
    with cluster.api_client() as api:
        arqs = api.get('/v2/accelerator_requests').json()['arqs']
        devices = api.get('/v2/devices', headers={
            'OpenStack-API-Version': 'accelerator latest'}).json()['devices']
    return ([(a['uuid'], a['state']) for a in arqs if a['state'] in TRANSIENT_ARQ_STATES],
            [(d['uuid'], d.get('device_state')) for d in devices
             if d.get('device_state') in TRANSIENT_DEVICE_STATES])


def boot_delete_cycle(cluster, host):
    """A whole instance life on ``host``'s first PCI device; asserts everything
    along the way and that Placement and the database end as they began."""
    rp = cluster.pci_rp(host)
    placement_before = cluster.placement_tree(host)
    db_before = cluster.db_view(host)
    with cluster.api_client() as api:
        ensure_profile(api)
        instance, arqs = boot(cluster, api, host, rp)
        assert [(a['state'], a['hostname'], a['device_rp_uuid'], a['instance_uuid'])
                for a in arqs] == [('Bound', host, rp, instance)]
        bus, device = cluster_mod.PCI_ADDRESSES[0].split(':')[1:]
        assert arqs[0]['attach_handle_info'] == {
            'domain': '0000', 'bus': bus, 'device': device.split('.')[0],
            'function': '0'}
        devices, _ = cluster.db_view(host)
        bound = [d for d in devices.values() if cluster_mod.PCI_ADDRESSES[0] in
                 d['std_board_info']]
        assert [d['device_state'] for d in bound] == ['allocated']
        # A single-accelerator device is reserved whole while bound (spec 1).
        inv = cluster.placement_tree(host)[f'{host}_{cluster_mod.PCI_ADDRESSES[0]}'][0]
        assert inv[cluster_mod.PCI_RC]['reserved'] == 1
        delete(cluster, api, instance)
        assert api.get('/v2/accelerator_requests', params={
            'instance': instance}).json()['arqs'] == []
    after = wait_equal(lambda: cluster.placement_tree(host), placement_before)
    assert {k: v for k, v in after.items() if placement_before.get(k) != v} == {}
    assert after == placement_before
    assert cluster.db_view(host) == db_before

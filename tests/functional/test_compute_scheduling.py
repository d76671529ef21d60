"""Scheduling and claims of the compute side against the real Placement: the
OWNER_NOVA pre-filter keeps Nova-owned and Cyborg-owned devices apart, the
compute node is prepared idempotently, and ARQs match providers by mappings."""
import uuid

import pytest

from steward.common import exception
from steward.compute import arq_flow
from steward.compute import clients
from steward.compute import request
from steward.compute import scheduler
from tests.fixtures.placement_fixture import admin_session, get_placement, unique_name


@pytest.fixture(scope='module')
def placement_server():
    return get_placement()


@pytest.fixture
def api(placement_server, conf):
    return clients.PlacementApi.from_conf(conf, endpoint=placement_server.url)


@pytest.fixture
def tree(placement_server, tmp_path):
    """A compute node (no inventory, no traits: what `steward serve` creates) with
    a Cyborg-owned and a Nova-owned child offering the same custom class."""
    rc = 'CUSTOM_PCI_' + uuid.uuid4().hex[:8].upper()
    s = admin_session(placement_server.url)
    ids = {k: str(uuid.uuid4()) for k in ('root', 'cyborg', 'nova')}
    names = {k: unique_name(k) for k in ids}
    assert s.post('/resource_providers', json={'name': names['root'],
                                                'uuid': ids['root']}).status_code == 200
    for kind in ('cyborg', 'nova'):
        assert s.post('/resource_providers', json={
            'name': names[kind], 'uuid': ids[kind],
            'parent_provider_uuid': ids['root']}).status_code == 200
    assert s.put(f'/resource_classes/{rc}').status_code in (201, 204)
    for kind, owner in (('cyborg', 'OWNER_CYBORG'), ('nova', 'OWNER_NOVA')):
        rp = ids[kind]
        r = s.put(f'/resource_providers/{rp}/traits', json={
            'resource_provider_generation': 0, 'traits': [owner]})
        assert r.status_code == 200, r.text
        r = s.put(f'/resource_providers/{rp}/inventories', json={
            'resource_provider_generation': 1,
            'inventories': {rc: {'total': 1, 'max_unit': 1}}})
        assert r.status_code == 200, r.text
    yield {'rc': rc, 'ids': ids, 'names': names, 'session': s,
           'state_path': str(tmp_path)}
    for consumer in list(_consumers):
        s.delete(f'/allocations/{consumer}')
    _consumers.clear()


_consumers = []


def flavor(**specs):
    return request.parse_flavor({'name': 'f', 'vcpus': 1, 'ram': 64, 'disk': 0,
                                 'extra_specs': specs})


def dp(rc, n=1):
    return {'name': 'dp', 'groups': [{f'resources:{rc}': str(n)}]}


def claim(api, tree, req):
    instance = str(uuid.uuid4())
    _consumers.append(instance)
    return scheduler.claim(api, req, instance, tree['ids']['root'])


def test_prepare_compute_node_is_idempotent(api, tree):
    root = tree['ids']['root']
    changed = scheduler.prepare_compute_node(api, root, tree['state_path'])
    assert changed[0] == 'trait OWNER_NOVA' and changed[1].startswith('inventory ')
    s = tree['session']
    inv = s.get(f'/resource_providers/{root}/inventories').json()
    assert {'VCPU', 'MEMORY_MB'} <= set(inv['inventories'])
    assert s.get(f'/resource_providers/{root}/traits').json()['traits'] == ['OWNER_NOVA']
    generation = inv['resource_provider_generation']
    assert scheduler.prepare_compute_node(api, root, tree['state_path']) == []
    assert s.get(f'/resource_providers/{root}/inventories').json()[
        'resource_provider_generation'] == generation


def test_a_root_with_nova_inventory_keeps_it(api, tree):
    root, s = tree['ids']['root'], tree['session']
    assert s.put(f'/resource_providers/{root}/inventories', json={
        'resource_provider_generation': 0,
        'inventories': {'VCPU': {'total': 3}}}).status_code == 200
    assert scheduler.prepare_compute_node(api, root, tree['state_path']) == [
        'trait OWNER_NOVA']
    inv = s.get(f'/resource_providers/{root}/inventories').json()['inventories']
    assert set(inv) == {'VCPU'} and inv['VCPU']['total'] == 3


def test_device_profile_group_never_lands_on_a_nova_owned_device(api, tree):
    scheduler.prepare_compute_node(api, tree['ids']['root'], tree['state_path'])
    req = request.build(flavor(**{'accel:device_profile': 'dp'}), dp(tree['rc']))
    candidates, _ = scheduler.candidates(api, req, in_tree=tree['ids']['root'])
    assert [c['mappings']['_DEVICE_PROFILE_0'] for c in candidates] == [
        [tree['ids']['cyborg']]]
    first = claim(api, tree, req)
    assert first.allocations[tree['ids']['cyborg']] == {tree['rc']: 1}
    assert first.allocations[tree['ids']['root']] == {'VCPU': 1, 'MEMORY_MB': 64}
    # The Cyborg device is used up; the free Nova-owned one must not be offered.
    with pytest.raises(exception.NoValidHost):
        claim(api, tree, req)


def test_nova_group_never_lands_on_a_cyborg_owned_device(api, tree):
    scheduler.prepare_compute_node(api, tree['ids']['root'], tree['state_path'])
    req = request.build(flavor(**{f'resources:{tree["rc"]}': '1'}))
    candidates, _ = scheduler.candidates(api, req, in_tree=tree['ids']['root'])
    assert [sorted(c['allocations']) for c in candidates] == [
        sorted([tree['ids']['root'], tree['ids']['nova']])]
    claim(api, tree, req)
    with pytest.raises(exception.NoValidHost):
        claim(api, tree, req)


def test_without_the_prefilter_nova_groups_take_cyborg_devices(api, tree):
    """What the pre-filter prevents (so the tests above can fail)."""
    scheduler.prepare_compute_node(api, tree['ids']['root'], tree['state_path'])
    req = request.build(flavor(**{f'resources:{tree["rc"]}': '1'}),
                        owner_nova_prefilter=False)
    candidates, _ = scheduler.candidates(api, req, in_tree=tree['ids']['root'])
    used = {rp for c in candidates for rp in c['allocations']}
    assert tree['ids']['cyborg'] in used and tree['ids']['nova'] in used


def test_a_root_without_owner_nova_is_never_chosen(api, tree):
    # No prepare_compute_node: the root lacks OWNER_NOVA (and inventory).
    s, root = tree['session'], tree['ids']['root']
    assert s.put(f'/resource_providers/{root}/inventories', json={
        'resource_provider_generation': 0,
        'inventories': {'VCPU': {'total': 4}, 'MEMORY_MB': {'total': 1024}}}
    ).status_code == 200
    req = request.build(flavor(**{'accel:device_profile': 'dp'}), dp(tree['rc']))
    assert scheduler.candidates(api, req, in_tree=root)[0] == []
    off = request.build(flavor(**{'accel:device_profile': 'dp'}), dp(tree['rc']),
                        owner_nova_prefilter=False)
    assert len(scheduler.candidates(api, off, in_tree=root)[0]) == 1


def test_arqs_match_providers_through_mappings(api, tree):
    scheduler.prepare_compute_node(api, tree['ids']['root'], tree['state_path'])
    req = request.build(flavor(**{'accel:device_profile': 'dp'}), dp(tree['rc']))
    c = claim(api, tree, req)
    arqs = [{'uuid': 'a1', 'device_profile_group_id': 0}]
    assert arq_flow.match(arqs, req, c) == {'a1': tree['ids']['cyborg']}
    with pytest.raises(exception.BindFailed, match='group 3'):
        arq_flow.match([{'uuid': 'a2', 'device_profile_group_id': 3}], req, c)
    assert c.names[tree['ids']['cyborg']] == tree['names']['cyborg']


def test_release_is_idempotent(api, tree):
    scheduler.prepare_compute_node(api, tree['ids']['root'], tree['state_path'])
    req = request.build(flavor())
    c = claim(api, tree, req)
    assert scheduler.release(api, c.instance_uuid) is True
    assert scheduler.release(api, c.instance_uuid) is False
    usages = tree['session'].get(f"/resource_providers/{tree['ids']['root']}/usages")
    assert usages.json()['usages'] == {'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0}


def test_missing_compute_node(api):
    with pytest.raises(exception.NoValidHost, match='no compute-node'):
        scheduler.find_compute_node(api, unique_name('nohost'))

"""An instance holding ARQs on two hosts at once, as during a move (resize, cold or
live migration, issue 32): the destination's set binds while the source's is
Bound; ``DELETE ?arqs=`` releases only the set it names (the source's on confirm,
the destination's on revert) and the other stays Bound with its allocation.

Two agents on two hosts (each its own RPC server and driver) against the real
conductor, database (every kind) and Placement, through the v2 API. The NVMe
stand-in of lifecycle_stack (its devices need cleaning once released) and the
real mdev driver on two fake mdev trees.
"""
import json
import uuid

import pytest
from starlette import testclient

from steward.agent.manager import AgentManager
from steward.conductor.local_api import LocalConductorAPI
from steward.conf import CONF
from steward.db import models as m
from steward.drivers.mdev import driver as mdev
from steward.placement import client as placement_client
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.fixtures import stack
from tests.functional import lifecycle_stack
from tests.functional.lifecycle_stack import RC
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)
from tests.fixtures.mdev_tree import MTTY_TYPES, MdevTree

URL = '/v2/accelerator_requests'
ALL_DBS = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)


@pytest.fixture
def two(life, conf):
    """(LifeStack on host A, Host B), each with one NVMe stand-in device."""
    st = life.start()
    b = lifecycle_stack.second_host(st, conf)
    yield st, b
    b.stop()


def _device_on(st, host):
    (dev,) = [d for d in st.devices() if d['hostname'] == host]
    return dev


def _placement(st):
    return placement_fixture.admin_session(st.placement_url)


def _allocate(st, consumer, rp, rc=RC):
    with _placement(st) as s:
        r = s.put(f'/allocations/{consumer}', json={
            'allocations': {rp: {'resources': {rc: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text


def _move_allocations(st, source, target, types=('INSTANCE', 'MIGRATION')):
    """Nova's move_allocations (scheduler/client/report.py): one POST
    /allocations gives ``target`` what ``source`` holds and empties ``source``.
    One transaction, so a device Steward reserves whole while it is bound
    (reserved = total) keeps its allocation: Placement lets a write that does not
    raise a provider's usage through."""
    with _placement(st) as s:
        held = s.get(f'/allocations/{source}').json()
        tgt = s.get(f'/allocations/{target}').json()
        body = {
            target: {'allocations': {rp: {'resources': a['resources']}
                                     for rp, a in held['allocations'].items()},
                     'project_id': 'p', 'user_id': 'u',
                     'consumer_generation': tgt.get('consumer_generation'),
                     'consumer_type': types[1]},
            source: {'allocations': {}, 'project_id': 'p', 'user_id': 'u',
                     'consumer_generation': held['consumer_generation'],
                     'consumer_type': types[0]}}
        r = s.post('/allocations', json=body)
        assert r.status_code == 204, r.text


def _allocations(st, consumer):
    with _placement(st) as s:
        return set(s.get(f'/allocations/{consumer}').json()['allocations'])


def _reserved(st, rp, rc=RC):
    with _placement(st) as s:
        return s.get(f'/resource_providers/{rp}/inventories').json()[
            'inventories'][rc]['reserved']


def _lifted(st, rp):
    """Placement's reservation of ``rp`` once lifted: the release lifts it after
    the device's state commits (arq_ops.after_release), so a test that has just
    seen ``available`` waits for it (CI read 1 there once, on MariaDB)."""
    return stack.wait_for(lambda: _reserved(st, rp) == 0, f'reserved of {rp} lifted') \
        and _reserved(st, rp)


def _bind(api, arq, host, rp, inst):
    return api.patch(URL, json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})


def _new_arq(api, profile='life'):
    r = api.post(URL, json={'device_profile_name': profile})
    assert r.status_code == 201, r.text
    return r.json()['arqs'][0]['uuid']


def _by_instance(api, inst):
    r = api.get(URL, params={'instance': inst})
    assert r.status_code == 200, r.text
    return {a['uuid']: (a['state'], a['device_rp_uuid'], a['hostname'])
            for a in r.json()['arqs']}


def move(st, b):
    """Boot on A, then what Nova does for a move to B: the source's allocation to
    the migration's consumer, the instance's to the destination, and the
    destination's ARQ bound while the source's is Bound."""
    dev_a, dev_b = _device_on(st, st.host), _device_on(st, b.name)
    rp_a, rp_b = st.deployable(dev_a)['rp_uuid'], st.deployable(dev_b)['rp_uuid']
    inst, src = st.bind(dev_a)
    migration = str(uuid.uuid4())
    _move_allocations(st, inst, migration)
    _allocate(st, inst, rp_b)           # the scheduler's claim at the destination
    assert _allocations(st, migration) == {rp_a}
    dst = _new_arq(st.api)
    r = _bind(st.api, dst, b.name, rp_b, inst)
    assert r.status_code == 202, r.text
    assert _by_instance(st.api, inst) == {src: ('Bound', rp_a, st.host),
                                          dst: ('Bound', rp_b, b.name)}
    assert st.device(dev_a['uuid'])['device_state'] == 'allocated'
    assert st.device(dev_b['uuid'])['device_state'] == 'allocated'
    assert (_reserved(st, rp_a), _reserved(st, rp_b)) == (1, 1)
    return dict(inst=inst, migration=migration, src=src, dst=dst, dev_a=dev_a,
                dev_b=dev_b, rp_a=rp_a, rp_b=rp_b)


@ALL_DBS
def test_confirm_deletes_the_source_set_only(database, db, two):
    st, b = two
    mv = move(st, b)
    with _placement(st) as s:
        s.delete(f"/allocations/{mv['migration']}")
    r = st.api.delete(URL, params={'arqs': mv['src']})
    assert r.status_code == 204, r.text
    # The source's device goes through cleaning and back in service...
    assert st.wait_state(mv['dev_a']['uuid'], ('available', 'error'))[
        'device_state'] == 'available'
    assert st.driver.cleaned == [mv['dev_a']['uuid']]
    assert _lifted(st, mv['rp_a']) == 0
    # ...the destination's set stays Bound, with its device and allocation.
    assert _by_instance(st.api, mv['inst']) == {mv['dst']: ('Bound', mv['rp_b'], b.name)}
    assert st.device(mv['dev_b']['uuid'])['device_state'] == 'allocated'
    assert b.driver.cleaned == []
    assert _reserved(st, mv['rp_b']) == 1
    assert _allocations(st, mv['inst']) == {mv['rp_b']}
    # Accelerators still cannot be added to the instance on its (new) host.
    third = _new_arq(st.api)
    r = _bind(st.api, third, b.name, mv['rp_b'], mv['inst'])
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.arq.instance_already_bound'


@ALL_DBS
def test_revert_deletes_the_destination_set_only(database, db, two):
    st, b = two
    mv = move(st, b)
    # Nova's revert: the source's allocation back to the instance, replacing
    # the destination's, in one POST.
    _move_allocations(st, mv['migration'], mv['inst'], ('MIGRATION', 'INSTANCE'))
    r = st.api.delete(URL, params={'arqs': mv['dst']})
    assert r.status_code == 204, r.text
    assert st.wait_state(mv['dev_b']['uuid'], ('available', 'error'))[
        'device_state'] == 'available'
    assert b.driver.cleaned == [mv['dev_b']['uuid']]
    assert _lifted(st, mv['rp_b']) == 0
    assert _by_instance(st.api, mv['inst']) == {mv['src']: ('Bound', mv['rp_a'], st.host)}
    assert st.device(mv['dev_a']['uuid'])['device_state'] == 'allocated'
    assert st.driver.cleaned == []
    assert _reserved(st, mv['rp_a']) == 1
    assert _allocations(st, mv['inst']) == {mv['rp_a']}
    # Deleting the instance afterwards releases what is left.
    st.release(mv['inst'])
    assert st.wait_state(mv['dev_a']['uuid'], ('available', 'error'))[
        'device_state'] == 'available'
    assert _by_instance(st.api, mv['inst']) == {}


@ALL_DBS
def test_a_second_set_on_the_same_host_is_still_refused(database, db, two):
    """Only another host makes a second set: on the instance's own host it would
    be adding accelerators to an existing instance, which Nova never does."""
    st, b = two
    st.driver.slots['0000:0a:00.1'] = ('SN-A2', 'nqn.2014-08.org.example:ctrl-a2')
    st.discover()
    devs = sorted((d for d in st.devices() if d['hostname'] == st.host),
                  key=lambda d: d['uuid'])
    inst, _ = st.bind(devs[0])
    before = st.api.get(URL).json()
    other = _new_arq(st.api)
    rp = st.deployable(devs[1])['rp_uuid']
    r = _bind(st.api, other, st.host, rp, inst)
    assert r.status_code == 400 and r.json()['error_code'] == 'cyb.arq.instance_already_bound'
    assert f'on host {st.host};' in r.json()['error_message']
    after = st.api.get(URL).json()
    assert [a for a in after['arqs'] if a['uuid'] != other] == before['arqs']
    assert st.device(devs[1]['uuid'])['device_state'] == 'available'


# -- mdev: the handle comes back, nothing to clean -------------------------------------
@ALL_DBS
def test_mdev_sets_on_two_hosts(transport, database, db, conf, tmp_path):
    CONF([], project='steward', default_config_files=[])
    server = placement_fixture.get_placement()
    placement = placement_client.PlacementClient.from_conf(endpoint=server.url)
    hosts = [placement_fixture.unique_name('mdev-a'), placement_fixture.unique_name('mdev-b')]
    trees = {}
    for h in hosts:
        trees[h] = MdevTree(tmp_path / h)
        trees[h].add_virtual_parent('mtty', MTTY_TYPES)
    conf.set_override('device_spec', [json.dumps({'address': 'mtty', 'mdev_type': 'mtty-2',
                                                  'live_migratable': True})], group='mdev')
    conf.set_override('sysfs_root', str(trees[hosts[0]].root))
    conductor, _ = cf.stack(database, transport, conf, placement, host=hosts[0],
                            drivers=[mdev.MdevDriver(conf, hosts[0])])
    conf.set_override('sysfs_root', str(trees[hosts[1]].root))
    agent_b = AgentManager(conf, LocalConductorAPI(conductor), host=hosts[1],
                           drivers=[mdev.MdevDriver(conf, hosts[1])])
    agent_b.init_host()
    agent_b.run_cycle()
    rc = mdev.default_resource_class('mtty-2')
    cf.make_profile(database, 'mt', [{f'resources:{rc}': '1'}])
    api = testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                                raise_server_exceptions=False)
    deps = {d['name']: d for d in api.get('/v2/deployables').json()['deployables']}
    rps = {h: deps[f'{h}_mdev_mtty_mtty-2']['rp_uuid'] for h in hosts}

    def free(h):
        return sum(1 for hd in _handles_of(database, rps[h]) if not hd)

    inst, arqs = str(uuid.uuid4()), {}
    for h in hosts:
        arqs[h] = _new_arq(api, 'mt')
        r = _bind(api, arqs[h], h, rps[h], inst)
        assert r.status_code == 202, r.text
    got = _by_instance(api, inst)
    assert got == {arqs[h]: ('Bound', rps[h], h) for h in hosts}
    assert [free(h) for h in hosts] == [11, 11]
    h27 = {'OpenStack-API-Version': 'accelerator 2.7'}
    for a in api.get(URL, params={'instance': inst}, headers=h27).json()['arqs']:
        assert a['attach_handle_info']['live_migratable'] is True
    assert api.delete(URL, params={'arqs': arqs[hosts[0]]}).status_code == 204
    assert _by_instance(api, inst) == {arqs[hosts[1]]: ('Bound', rps[hosts[1]], hosts[1])}
    assert [free(h) for h in hosts] == [12, 11]
    api.close()
    conductor.stop()


def _handles_of(database, rp):
    """in_use of each attach handle of the deployable with provider ``rp``."""
    with database.reader() as s:
        dep = s.query(m.Deployable).filter_by(rp_uuid=rp).one()
        return [h.in_use for h in s.query(m.AttachHandle).filter_by(deployable_id=dep.id)]

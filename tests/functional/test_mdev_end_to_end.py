"""mdev types end to end: a fake mdev sysfs tree, the real mdev (and NVIDIA) driver,
the real agent and conductor on SQLite, the real Placement and the v2 API.

Nova's part is played the way Nova plays it: it picks a provider from Placement's
allocation candidates, allocates there, then binds the ARQ through the API; for an
MDEV ARQ it then creates the mdev with the attach handle's uuid (in the fake tree).
"""
import json
import uuid

import pytest
from starlette import testclient

from steward.agent.manager import AgentManager
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.conf import nvidia as nvidia_conf
from steward.db import models as m
from steward.drivers.mdev import driver as mdev
from steward.drivers import nvidia_gpu
from steward.placement import client as placement_client
from tests.fixtures import placement_fixture
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.fixtures.mdev_tree import I915_TYPES, MDPY_TYPES, MTTY_TYPES, MdevTree

URL = '/v2/accelerator_requests'
GVT = '0000:00:02.0'
ENTRIES = [
    {'address': 'mtty', 'mdev_type': 'mtty-1'},
    {'address': 'mtty', 'mdev_type': 'mtty-2'},
    {'address': 'mdpy', 'mdev_type': 'mdpy-vga'},                    # 4 instances
    {'address': GVT, 'mdev_type': 'i915-GVTg_V5_4', 'max_instances': 6},
]


pytestmark = pytest.mark.usefixtures('parsed_conf')


class Env:
    def __init__(self, conf, tree, placement, server, database, transport):
        self.conf, self.tree, self.placement, self.server = conf, tree, placement, server
        self.host = placement_fixture.unique_name('mdev-host')
        self.conductor = ConductorManager(cf.deps(database, transport, placement))
        self.conductor.init_host()
        self.agent = AgentManager(conf, LocalConductorAPI(self.conductor), host=self.host,
                                  drivers=[mdev.MdevDriver(conf, self.host)])
        self.agent.init_host()
        self.first = self.agent.run_cycle()
        self.api = testclient.TestClient(roots.api_app(LocalConductorAPI(self.conductor),
                                                       database),
                                         raise_server_exceptions=False)
        self.admin = placement_fixture.admin_session(server.url)

    def cycle(self):
        """One discovery cycle; the number of Placement writes it made."""
        before = self.placement.stats['writes']
        self.agent.run_cycle()
        return self.placement.stats['writes'] - before

    def deployable(self, type_name):
        deps = self.api.get('/v2/deployables').json()['deployables']
        return next(d for d in deps if d['name'].endswith(f'_{type_name}'))

    def generations(self):
        """Generation of every provider of this host's tree."""
        root = self.admin.get('/resource_providers', params={'name': self.host}).json()
        rps = self.admin.get('/resource_providers', params={
            'in_tree': root['resource_providers'][0]['uuid']}).json()
        return {rp['uuid']: rp['generation'] for rp in rps['resource_providers']}

    def inventory(self, rp_uuid):
        return self.admin.get(f'/resource_providers/{rp_uuid}/inventories').json()[
            'inventories']

    def profile(self, rc):
        name = f'dp-{rc.lower()}'
        r = self.api.post('/v2/device_profiles', json=[{
            'name': name, 'groups': [{f'resources:{rc}': '1'}]}])
        assert r.status_code == 201, r.text
        return name

    def candidate(self, rc):
        """The provider Nova's scheduler would pick for one ``rc`` on this host (the
        Placement server is shared with other tests)."""
        root = self.admin.get('/resource_providers', params={'name': self.host}).json()
        r = self.admin.get('/allocation_candidates', params={
            'resources': f'{rc}:1', 'required': 'OWNER_CYBORG',
            'in_tree': root['resource_providers'][0]['uuid']})
        assert r.status_code == 200, r.text
        rps = [rp for rp, s in r.json()['provider_summaries'].items()
               if rc in s['resources']]
        assert len(rps) == 1, rps
        return rps[0]

    def allocate(self, instance, rp_uuid, rc):
        return self.admin.put(f'/allocations/{instance}', json={
            'allocations': {rp_uuid: {'resources': {rc: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})

    def new_arq(self, profile):
        r = self.api.post(URL, json={'device_profile_name': profile})
        assert r.status_code == 201, r.text
        return r.json()['arqs'][0]['uuid']

    def bind(self, arq_uuid, rp_uuid, instance):
        return self.api.patch(URL, json={arq_uuid: [
            {'op': 'add', 'path': '/hostname', 'value': self.host},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': instance}]})

    def boot(self, profile, rc):
        """Nova's sequence for one instance; returns (instance, bound ARQ)."""
        rp = self.candidate(rc)
        instance = str(uuid.uuid4())
        r = self.allocate(instance, rp, rc)
        assert r.status_code == 204, r.text
        arq_uuid = self.new_arq(profile)
        r = self.bind(arq_uuid, rp, instance)
        assert r.status_code == 202, r.text
        return instance, self.api.get(f'{URL}/{arq_uuid}').json()


@pytest.fixture
def env(database, transport, conf, tmp_path):
    tree = MdevTree(tmp_path / 'sys')
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    tree.add_virtual_parent('mdpy', MDPY_TYPES)
    tree.add_pci_parent(GVT, I915_TYPES)
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [json.dumps(e) for e in ENTRIES], group='mdev')
    server = placement_fixture.get_placement()
    client = placement_client.PlacementClient.from_conf(endpoint=server.url)
    e = Env(conf, tree, client, server, database, transport)
    yield e
    e.admin.close()
    e.conductor.stop()


def handles(database, deployable_uuid):
    with database.reader() as s:
        dep = s.query(m.Deployable).filter_by(uuid=deployable_uuid).one()
        return sorted((h.uuid, h.in_use) for h in
                      s.query(m.AttachHandle).filter_by(deployable_id=dep.id))


def test_discovery_reaches_placement(database, env):
    assert env.first['placement_writes'] > 0
    for type_name, rc, total in (('mtty-1', 'CUSTOM_MDEV_MTTY_1', 24),
                                 ('mtty-2', 'CUSTOM_MDEV_MTTY_2', 12),
                                 ('mdpy-vga', 'CUSTOM_MDEV_MDPY_VGA', 4),
                                 ('i915-GVTg_V5_4', 'CUSTOM_MDEV_I915_GVTG_V5_4', 6)):
        dep = env.deployable(type_name)
        assert dep['num_accelerators'] == total
        inv = env.inventory(dep['rp_uuid'])
        assert {rc: (inv[rc]['total'], inv[rc]['reserved'])} == {rc: (total, 0)}
        traits = env.admin.get(f"/resource_providers/{dep['rp_uuid']}/traits").json()
        assert traits['traits'] == ['OWNER_CYBORG']
    devices = env.api.get('/v2/devices').json()['devices']
    assert sorted((d['type'], d['model']) for d in devices) == [
        ('MDEV', '1912'), ('MDEV', 'mdpy'), ('MDEV', 'mtty')]
    assert env.cycle() == 0


def test_mtty_2_profile_gets_a_bound_mdev_arq(database, env):
    profile = env.profile('CUSTOM_MDEV_MTTY_2')
    _, arq = env.boot(profile, 'CUSTOM_MDEV_MTTY_2')
    assert arq['state'] == 'Bound'
    assert arq['attach_handle_type'] == 'MDEV'
    assert arq['attach_handle_info'] == {'asked_type': 'mtty-2', 'domain': '', 'bus': '',
                                         'device': 'mtty', 'function': ''}
    assert arq['device_rp_uuid'] == env.deployable('mtty-2')['rp_uuid']
    uuid.UUID(arq['attach_handle_uuid'])


def test_pci_parent_arq_carries_the_parent_address(env):
    profile = env.profile('CUSTOM_MDEV_I915_GVTG_V5_4')
    _, arq = env.boot(profile, 'CUSTOM_MDEV_I915_GVTG_V5_4')
    assert (arq['state'], arq['attach_handle_type']) == ('Bound', 'MDEV')
    assert arq['attach_handle_info'] == {'asked_type': 'i915-GVTg_V5_4', 'domain': '0000',
                                         'bus': '00', 'device': '02', 'function': '0'}


def test_four_instances_on_a_total_of_four_and_the_fifth_refused(database, env):
    rc = 'CUSTOM_MDEV_MDPY_VGA'
    dep = env.deployable('mdpy-vga')
    profile = env.profile(rc)
    bound = [env.boot(profile, rc)[1] for _ in range(4)]
    assert {a['state'] for a in bound} == {'Bound'}
    assert len({a['attach_handle_uuid'] for a in bound}) == 4
    assert {a['attach_handle_info']['asked_type'] for a in bound} == {'mdpy-vga'}
    # Several accelerators on the device: Placement's allocations count usage and
    # nothing is reserved (reserving would hide the other instances).
    inv = env.inventory(dep['rp_uuid'])[rc]
    assert (inv['total'], inv['reserved']) == (4, 0)
    usages = env.admin.get(f"/resource_providers/{dep['rp_uuid']}/usages").json()
    assert usages['usages'] == {rc: 4}

    # Placement no longer offers the provider, and refuses a fifth allocation ...
    r = env.admin.get('/allocation_candidates', params={'resources': f'{rc}:1'})
    assert dep['rp_uuid'] not in r.json()['provider_summaries']
    fifth_instance = str(uuid.uuid4())
    assert env.allocate(fifth_instance, dep['rp_uuid'], rc).status_code == 409
    # ... and a bind that tries anyway is refused cleanly, changing nothing.
    fifth = env.new_arq(profile)
    before_arq = env.api.get(f'{URL}/{fifth}').json()
    before_handles = handles(database, dep['uuid'])
    r = env.bind(fifth, dep['rp_uuid'], fifth_instance)
    assert r.status_code == 409, r.text
    assert r.json()['error_code'] == 'cyb.bind.no_free_handle'
    assert env.api.get(f'{URL}/{fifth}').json() == before_arq
    assert before_arq['state'] == 'Initial'
    assert handles(database, dep['uuid']) == before_handles
    assert sum(in_use for _, in_use in before_handles) == 4
    assert env.inventory(dep['rp_uuid'])[rc]['reserved'] == 0
    # Releasing one makes room for exactly one more.
    env.api.delete(URL, params={'instance': bound[0]['instance_uuid']})
    env.admin.delete(f"/allocations/{bound[0]['instance_uuid']}")
    assert env.boot(profile, rc)[1]['state'] == 'Bound'


def test_mdevs_created_by_nova_and_outside_steward_leave_placement_alone(database, env):
    rc = 'CUSTOM_MDEV_MTTY_2'
    profile = env.profile(rc)
    bound = [env.boot(profile, rc)[1] for _ in range(2)]
    dep = env.deployable('mtty-2')
    before = handles(database, dep['uuid'])
    # Nova creates each bound ARQ's mdev with the attach handle's uuid (spec 5) ...
    for arq in bound:
        env.tree.create_instance('mtty', 'mtty-2', arq['attach_handle_uuid'])
    # ... and someone creates one more by hand: available - 3, created + 3.
    env.tree.create_instance('mtty', 'mtty-2')
    assert env.tree.available('mtty', 'mtty-2') == 9
    assert env.cycle() == 0                     # total still 12: no Placement write
    assert env.inventory(dep['rp_uuid'])[rc]['total'] == 12
    assert handles(database, dep['uuid']) == before


def test_shrinking_capacity_keeps_bound_handles(database, env):
    rc = 'CUSTOM_MDEV_MTTY_2'
    profile = env.profile(rc)
    bound = {env.boot(profile, rc)[1]['attach_handle_uuid'] for _ in range(3)}
    dep = env.deployable('mtty-2')
    generations = env.generations()
    # Five single-port mdevs created outside Steward: mtty-1 keeps its total of 24
    # (19 + 5), while mtty-2 can only place 9 dual-port ones on the 19 free ports.
    for _ in range(5):
        env.tree.create_instance('mtty', 'mtty-1')
    env.tree.set_available('mtty', 'mtty-2', 9)
    errors = env.placement.stats['errors']
    writes = env.cycle()
    # One inventory PUT, on mtty-2 only; the allocations Nova made moved the
    # provider's generation, so the client's first try may meet a 409 and retry.
    assert writes - (env.placement.stats['errors'] - errors) == 1
    changed = {rp for rp, g in env.generations().items() if generations[rp] != g}
    assert changed == {dep['rp_uuid']}
    assert env.inventory(dep['rp_uuid'])[rc]['total'] == 9
    assert env.inventory(env.deployable('mtty-1')['rp_uuid'])[
        'CUSTOM_MDEV_MTTY_1']['total'] == 24
    after = handles(database, dep['uuid'])
    assert len(after) == 9
    assert {u for u, in_use in after if in_use} == bound      # bound ones untouched
    assert env.deployable('mtty-2')['num_accelerators'] == 9
    for arq in env.api.get(URL).json()['arqs']:
        assert arq['state'] == 'Bound' and arq['attach_handle_uuid'] in bound
    assert env.cycle() == 0                     # and the next cycle is quiet again
    # Capacity coming back is reported the same way.
    env.tree.set_available('mtty', 'mtty-2', 12)
    assert env.cycle() >= 1
    assert env.inventory(dep['rp_uuid'])[rc]['total'] == 12
    assert {u for u, in_use in handles(database, dep['uuid']) if in_use} == bound


def test_quiet_cycles_write_nothing(database, env):
    for _ in range(3):
        assert env.cycle() == 0
    # Even when the conductor forgets the last report (a restart) and diffs it
    # against the database, identical handles are matched, not churned.
    dep = env.deployable('mtty-1')
    before = handles(database, dep['uuid'])
    env.conductor.reporter.forget()
    assert env.cycle() == 0
    assert handles(database, dep['uuid']) == before


# -- two mdev-capable drivers on one tree ------------------------------------------
def test_nvidia_and_mdev_drivers_on_one_gpu_first_listed_wins(transport, database, db, conf, tmp_path, caplog):
    gpu = '0000:84:00.0'
    tree = MdevTree(tmp_path / 'sys')
    tree.add_pci_parent(gpu, {'nvidia-222': {'available': 16, 'name': 'GRID T4-1B'}},
                        vendor='0x10de', product='0x1eb8', cls='0x030200')
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [
        json.dumps({'address': gpu, 'mdev_type': 'nvidia-222'}),
        json.dumps({'address': 'mtty', 'mdev_type': 'mtty-2'})], group='mdev')
    conf.set_override('enabled_vgpu_types', ['nvidia-222'], group='nvidia_gpu')
    nvidia_conf.register_vgpu_groups(conf)
    conductor = ConductorManager(cf.deps(database, transport))
    host = 'host-a'
    agent = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                         drivers=[nvidia_gpu.NvidiaGpuDriver(conf, host),
                                  mdev.MdevDriver(conf, host)])
    agent.run_cycle()
    assert 'Drivers nvidia_gpu and mdev both report 0000:84:00.0; nvidia_gpu (listed ' \
           'first) keeps it' in caplog.text
    with database.reader() as s:
        rows = sorted((d.name, d.driver_name, d.num_accelerators)
                      for d in s.query(m.Deployable))
        rcs = sorted(a.value for a in s.query(m.Attribute).filter_by(key='rc'))
    assert rows == [(f'{host}_{gpu}', 'nvidia_gpu', 16),
                    (f'{host}_mdev_mtty_mtty-2', 'mdev', 12)]
    assert rcs == ['CUSTOM_MDEV_MTTY_2', 'VGPU']

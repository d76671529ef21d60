"""The real Nova 34 schedules whole accelerator servers onto Steward's pools
(issue 52), against Steward's multi-host services (tests/nova/cloud.py: Steward's
API, conductor and an agent on each compute host, RabbitMQ, PostgreSQL, one real
Placement shared with Nova; Nova's API, conductor, scheduler and two nova-compute on
the fake virt driver, with contrib/nova applied).

Both compute hosts are eight-GPU servers (``NovaCloud(pooled=...)``): eight
10de:2330 functions on vfio-pci, all on NUMA node 0, under one ``[pci]
device_spec`` entry tagged ``pool`` with ``resource_class: PGPU``, so each host
offers ONE Placement provider of total = max_unit = 8. Device profiles of one
group ask for 8, 4 or 2 units; Nova maps every ARQ of the group to the group's
provider and Steward's bind gives each its own function.

Every step is driven through Nova's REST API as an operator would, and after each
one ``assert_host`` checks each host's whole picture: the ARQs bound there (Bound,
to the host's pool, for the expected instances, one function each, no function
twice); the pool's Placement inventory (8/8, nothing reserved), its allocations
exactly the expected consumers' units and the compute node's their flavors; every
function ``allocated`` exactly when an ARQ holds it, ``available`` otherwise.
Besides Steward's view, what Nova's compute gave its fake virt driver (the
``accel_info`` of spawn and finish_revert_migration, recorded by
tests/nova/nova_cloud.py) and, for the eight-GPU boot, the domain XML the
patched libvirt driver builds from the instance's ARQs
(tests/nova/nova_consumer.py). One deployment for the module; the scenarios run
in order, each leaving both hosts idle.
"""
import json
import os
import uuid

from lxml import etree
import pytest

from tests.multihost import cluster as cluster_mod
from tests.nova import cloud as cloud_mod
from tests.nova import series

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(series.XDIST_GROUP)]

C1, C2 = cloud_mod.HOSTS
IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'      # Nova's GlanceFixture image
A_LATEST = {'OpenStack-API-Version': 'accelerator latest'}
RC = cloud_mod.POOL_RC
ADDRESSES = set(cloud_mod.POOL_ADDRESSES)
DOMAIN_RNG = '/usr/share/libvirt/schemas/domain.rng'


@pytest.fixture(scope='module')
def cloud():
    cluster_mod.require()
    series.prepare()
    c = cloud_mod.NovaCloud(pooled=cloud_mod.HOSTS).start()
    try:
        c.flavors = {}
        with c.api_client() as api:
            for gpus in (8, 4, 2):
                r = api.post('/v2/device_profiles', json=[{
                    'name': f'pgpu-{gpus}', 'groups': [{f'resources:{RC}': str(gpus)}]}])
                assert r.status_code == 201, r.text
        for gpus in (8, 4, 2):
            c.flavors[gpus] = Flavor(c, f'gpu{gpus}', gpus)
        yield c
    finally:
        c.stop()


class Flavor:
    """A Nova flavor asking for ``gpus`` functions of one pool through
    ``accel:device_profile`` (a profile of one group ``{resources:PGPU: gpus}``)."""

    def __init__(self, cloud, name, gpus, vcpus=1, ram=512, disk=1):
        self.name, self.gpus = name, gpus
        self.vcpus, self.ram, self.disk = vcpus, ram, disk
        self.id = cloud_mod.create_flavor(cloud, name, f'pgpu-{gpus}', vcpus, ram, disk)

    def compute_resources(self):
        return {'VCPU': self.vcpus, 'MEMORY_MB': self.ram, 'DISK_GB': self.disk}


# -- Nova, as an operator drives it ---------------------------------------------------
server = cloud_mod.server
arqs, allocations = cloud_mod.arqs, cloud_mod.allocations


def wait_server(cloud, sid, status, task_state=None):
    return cloud_mod.wait_server(cloud, sid, status, task_state, timeout=240)


def create(cloud, flavor, host=None):
    """POST /servers (on ``host`` when named: compute API 2.74's ``host``, which
    the scheduler still checks); the new server's id."""
    body = {'name': f'gpu-{uuid.uuid4().hex[:6]}', 'imageRef': IMAGE,
            'flavorRef': flavor.id, 'networks': 'none'}
    if host:
        body['host'] = host
    with cloud.nova_client() as nova:
        r = nova.post('/servers', json={'server': body})
    assert r.status_code == 202, r.text
    return r.json()['server']['id']


def boot(cloud, flavor, host=None):
    """A server ACTIVE; its host is checked by the caller."""
    sid = create(cloud, flavor, host)
    wait_server(cloud, sid, 'ACTIVE')
    return sid


NO_CANDIDATES = 'Got no allocation candidates from the Placement API'


def no_candidates(cloud):
    """How often Nova's scheduler has logged that Placement offered nothing."""
    path = cloud.nova.service_log_path
    return path.read_text(errors='replace').count(NO_CANDIDATES) if path.exists() else 0


def boot_refused(cloud, flavor, host=None):
    """A boot that finds no valid host: the server ERROR with Nova's NoValidHost
    fault, because Placement offered no candidate (the scheduler says so in its
    log: the pool's free units, not a filter), and nothing of it anywhere (ARQs
    are made only once a host is chosen, allocations only by the scheduler's
    claim)."""
    before = no_candidates(cloud)
    sid = create(cloud, flavor, host)
    s = wait_server(cloud, sid, 'ERROR')
    assert 'No valid host' in s['fault']['message'], s['fault']
    assert s['fault']['code'] == 500, s['fault']
    assert s.get('OS-EXT-SRV-ATTR:host') is None, s
    cloud_mod.wait_until(lambda: no_candidates(cloud), lambda n: n == before + 1,
                         "the scheduler's no candidates")
    assert arqs(cloud, sid) == [] and allocations(cloud, sid) == {}
    return sid


def action(cloud, sid, body):
    with cloud.nova_client() as nova:
        return nova.post(f'/servers/{sid}/action', json=body)


def act(cloud, sid, body, status):
    """The server action ``body``, then the server in ``status`` and every event of
    Nova's record of the action finished."""
    r = action(cloud, sid, body)
    assert r.status_code in (200, 202, 204), r.text
    wait_server(cloud, sid, status)
    name = list(body)[0]
    events = cloud_mod.wait_until(lambda: action_finished(cloud, sid, name), bool,
                                  f'{name} finished')
    assert {e['result'] for e in events} == {'Success'}, events


def action_finished(cloud, sid, name):
    with cloud.nova_client() as nova:
        actions = nova.get(f'/servers/{sid}/os-instance-actions').json()
        found = sorted((a['start_time'], a['request_id'])
                       for a in actions['instanceActions'] if a['action'] == name)
        if not found:
            return None
        r = nova.get(f'/servers/{sid}/os-instance-actions/{found[-1][1]}')
    assert r.status_code == 200, r.text
    events = r.json()['instanceAction']['events']
    return events if events and all(e['finish_time'] for e in events) else None


def delete(cloud, sid):
    with cloud.nova_client() as nova:
        assert nova.delete(f'/servers/{sid}').status_code == 204
        cloud_mod.wait_until(lambda: nova.get(f'/servers/{sid}').status_code,
                             lambda code: code == 404, f'server {sid} deleted')


def migration_uuid(cloud, sid):
    """The uuid of the server's migration in progress: Nova's consumer of the
    source's allocations during a resize."""
    with cloud.nova_client() as nova:
        r = nova.get(f'/servers/{sid}/migrations')
        if r.status_code == 200 and r.json()['migrations']:
            return r.json()['migrations'][0]['uuid']
        r = nova.get('/os-migrations', params={'instance_uuid': sid})
    assert r.status_code == 200, r.text
    return max(r.json()['migrations'], key=lambda m: m['id'])['uuid']


# -- what Steward and Placement hold ---------------------------------------------------
def address(info):
    """The PCI address of a PCI ARQ's attach_handle_info."""
    return f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"


def devices(cloud, host):
    """{PCI address: device} of ``host``'s devices (API latest: numa_node too)."""
    with cloud.api_client() as api:
        r = api.get('/v2/devices', params={'hostname': host}, headers=A_LATEST)
    assert r.status_code == 200, r.text
    return {json.loads(d['std_board_info'])['address']: d for d in r.json()['devices']}


def host_view(cloud, host):
    """What ``host`` holds: its ARQs {instance: [ARQ]}, the pool's PGPU inventory
    and usage, {consumer: resources} on the pool and on the compute node, every
    other provider of its tree that holds anything, and {address: device_state}."""
    pool, root = cloud.pool_rp(host), cloud.compute_rps[host]
    held = {}
    for a in arqs(cloud):
        if a['hostname'] == host:
            held.setdefault(a['instance_uuid'], []).append(a)
    with cloud.placement_client() as p:
        tree = p.get('/resource_providers', params={'in_tree': root}).json()
        by_rp = {}
        for rp in tree['resource_providers']:
            got = p.get(f'/resource_providers/{rp["uuid"]}/allocations').json()
            by_rp[rp['uuid']] = {c: a['resources'] for c, a in got['allocations'].items()}
        inventory = p.get(f'/resource_providers/{pool}/inventories').json()['inventories']
        usages = p.get(f'/resource_providers/{pool}/usages').json()['usages']
    return {'arqs': held,
            'providers': sorted(rp['uuid'] for rp in tree['resource_providers']),
            'inventory': inventory, 'usages': usages,
            'pool': by_rp.get(pool, {}), 'compute': by_rp.get(root, {}),
            'others': {rp: a for rp, a in by_rp.items() if a and rp not in (pool, root)},
            'devices': {a: d['device_state'] for a, d in devices(cloud, host).items()}}


def expected_allocations(held):
    """{consumer: pool resources}, {consumer: compute resources} of ``held``."""
    pool = {c or sid: {RC: f.gpus} for sid, f, c in held}
    compute = {c or sid: f.compute_resources() for sid, f, c in held}
    return pool, compute


def assert_host(cloud, host, held=()):
    """``host`` holds exactly ``held``, [(server, flavor, consumer)] (consumer: the
    holder of the Placement allocations, the server's own unless a migration
    holds the source during a resize, None for the server): each server's
    ``flavor.gpus`` ARQs Bound there, to the host's pool, each on its own
    function of the pool (NUMA node 0), no function twice on the host; the
    pool's inventory 8 = max_unit, nothing reserved, its allocations and the
    compute node's exactly the consumers' (usage their sum); every function an
    ARQ holds ``allocated``, every other ``available``. Releases lift a pool's
    transient reservation after the fact (reservation.py): waited for.
    Returns {server: set of the addresses it holds here}."""
    pool_rp = cloud.pool_rp(host)
    want_pool, want_compute = expected_allocations(held)
    want_gpus = {sid: f.gpus for sid, f, _ in held}

    def settled(v):
        taken = {address(a['attach_handle_info']) for x in v['arqs'].values() for a in x}
        return (v['pool'] == want_pool and v['compute'] == want_compute
                and v['inventory'].get(RC, {}).get('reserved') == 0
                and {i: len(x) for i, x in v['arqs'].items()} == want_gpus
                and all(a['state'] == 'Bound' for x in v['arqs'].values() for a in x)
                and {a for a, s in v['devices'].items() if s == 'allocated'} == taken
                and {a for a, s in v['devices'].items() if s != 'allocated'} <= {
                    a for a, s in v['devices'].items() if s == 'available'})
    view = cloud_mod.wait_until(lambda: host_view(cloud, host), settled,
                                f'{host} holding {want_gpus}', timeout=120)
    # The pool: one provider of eight under the compute node, nothing reserved,
    # its usage the units allocated; nothing anywhere else in the tree.
    assert view['providers'] == sorted([cloud.compute_rps[host], pool_rp]), view
    inv = view['inventory'][RC]
    assert (inv['total'], inv['max_unit'], inv['min_unit'], inv['reserved']) == (
        8, 8, 1, 0), inv
    assert view['usages'] == {RC: sum(f.gpus for _, f, _ in held)}, view['usages']
    assert view['pool'] == want_pool and view['compute'] == want_compute, view
    assert view['others'] == {}, view['others']
    # The ARQs: Bound there for their instance, to the pool, one function each.
    out = {}
    for sid, flavor, _ in held:
        mine = view['arqs'][sid]
        assert [(a['state'], a['instance_uuid'], a['device_rp_uuid'],
                 a['attach_handle_type']) for a in mine] == [
            ('Bound', sid, pool_rp, 'PCI')] * flavor.gpus, mine
        assert {a['device_profile_name'] for a in mine} == {f'pgpu-{flavor.gpus}'}
        assert {a['attach_handle_info']['numa_node'] for a in mine} == {
            cloud_mod.POOL_NUMA_NODE}, mine
        out[sid] = {address(a['attach_handle_info']) for a in mine}
        assert len(out[sid]) == flavor.gpus, out[sid]
    assert set(view['arqs']) == set(out), view['arqs']
    taken = [a for got in out.values() for a in got]
    assert len(taken) == len(set(taken)), out
    assert set(taken) <= ADDRESSES
    assert view['devices'] == {a: 'allocated' if a in taken else 'available'
                               for a in ADDRESSES}, view['devices']
    return out


def assert_idle(cloud, host):
    assert assert_host(cloud, host) == {}


def given_to_driver(cloud, sid, call='spawn'):
    """The newest ``call`` of the fake virt driver for ``sid``: (its host, the
    addresses of the ARQs it was given, their uuids)."""
    calls = [c for c in cloud.nova.accel_info() if c['instance'] == sid
             and c['call'] == call]
    assert calls, cloud.nova.accel_info()
    last = calls[-1]
    assert last['arqs'] is not None, last
    return (last['host'], [address(a['attach_handle_info']) for a in last['arqs']],
            {a['uuid'] for a in last['arqs']})


def pci_hostdevs(xml):
    """The addresses of the domain's PCI hostdevs, in the ``dddd:bb:ss.f`` form."""
    out = []
    for h in etree.fromstring(xml.encode()).findall('./devices/hostdev[@type="pci"]'):
        a = h.find('source/address')
        d, b, s, f = (int(a.get(k), 16) for k in ('domain', 'bus', 'slot', 'function'))
        out.append(f'{d:04x}:{b:02x}:{s:02x}.{f:x}')
    return out


# -- the scenarios, in order ------------------------------------------------------------
def test_each_host_offers_one_pool_of_eight(cloud):
    """Each host's eight functions: eight devices (numa_node 0 at API 2.9), eight
    deployables on ONE provider under Nova's compute node, named after the pool,
    total = max_unit = 8, OWNER_CYBORG; nothing held."""
    for host in cloud_mod.HOSTS:
        deps = cloud.deployables(host)
        assert sorted(d['name'] for d in deps) == sorted(
            f'{host}_{a}' for a in ADDRESSES)
        pool_rp = cloud.pool_rp(host)
        with cloud.placement_client() as p:
            rp = p.get(f'/resource_providers/{pool_rp}').json()
            traits = p.get(f'/resource_providers/{pool_rp}/traits').json()['traits']
        assert rp['name'].startswith(f'{host}_{RC}_numa{cloud_mod.POOL_NUMA_NODE}_'), rp
        assert rp['parent_provider_uuid'] == cloud.compute_rps[host], rp
        assert 'OWNER_CYBORG' in traits, traits
        found = devices(cloud, host)
        assert set(found) == ADDRESSES
        assert {d['numa_node'] for d in found.values()} == {cloud_mod.POOL_NUMA_NODE}
        assert_idle(cloud, host)


@pytest.fixture(scope='module')
def state():
    """What the scenarios hand on to the next."""
    return {}


def test_eight_gpus_boot_on_one_host(cloud, state, tmp_path):
    """A flavor whose profile asks for 8 boots on C1: its 8 ARQs Bound to C1's
    pool, on the 8 distinct functions of the host; Nova's allocation is 8 units of
    the pool; the fake driver's spawn was given those 8 ARQs, and the patched
    libvirt driver builds from them a domain of 8 distinct PCI hostdevs (valid
    against libvirt's schema). C2 holds nothing."""
    gpu8 = cloud.flavors[8]
    sid = boot(cloud, gpu8, C1)
    assert server(cloud, sid)['OS-EXT-SRV-ATTR:host'] == C1
    held = assert_host(cloud, C1, [(sid, gpu8, None)])
    assert held == {sid: ADDRESSES}
    assert_idle(cloud, C2)
    assert allocations(cloud, sid) == {cloud.compute_rps[C1]: gpu8.compute_resources(),
                                       cloud.pool_rp(C1): {RC: 8}}
    # What Nova's compute gave its virt driver at spawn.
    host, given, given_uuids = given_to_driver(cloud, sid)
    assert host == C1 and sorted(given) == sorted(ADDRESSES), given
    assert given_uuids == {a['uuid'] for a in arqs(cloud, sid)}
    # The domain the patched libvirt driver builds from the instance's ARQs,
    # read through Nova's own Cyborg client.
    result = series.consume(f'{cloud.api_url}/v2', [sid], tmp_path, patched=True)[sid]
    assert 'error' not in result, result
    hostdevs = pci_hostdevs(result['xml'])
    assert sorted(hostdevs) == sorted(ADDRESSES), result['xml']
    if os.path.exists(DOMAIN_RNG):
        rng = etree.RelaxNG(etree.parse(DOMAIN_RNG))
        assert rng.validate(etree.fromstring(result['xml'].encode())), rng.error_log
    state['first'] = sid


def test_a_second_eight_gpu_boot_finds_no_valid_host_until_the_first_is_deleted(
        cloud, state):
    """With C1's pool full: an 8-GPU boot asked onto C1 is No valid host (the
    server ERROR with the NoValidHost fault, nothing of it held anywhere); one
    with no host named lands on C2, the only free pool; with both full, the next
    is No valid host. Once the first is deleted (C1's eight functions back), the
    same boot lands on C1 and gets the eight again."""
    gpu8 = cloud.flavors[8]
    first = state.pop('first')
    refused = [boot_refused(cloud, gpu8, C1)]
    assert_host(cloud, C1, [(first, gpu8, None)])
    assert_idle(cloud, C2)

    second = boot(cloud, gpu8)
    assert server(cloud, second)['OS-EXT-SRV-ATTR:host'] == C2
    assert assert_host(cloud, C2, [(second, gpu8, None)]) == {second: ADDRESSES}
    refused.append(boot_refused(cloud, gpu8))
    assert_host(cloud, C1, [(first, gpu8, None)])
    assert_host(cloud, C2, [(second, gpu8, None)])

    delete(cloud, first)
    assert arqs(cloud, first) == [] and allocations(cloud, first) == {}
    assert_idle(cloud, C1)
    third = boot(cloud, gpu8)
    assert server(cloud, third)['OS-EXT-SRV-ATTR:host'] == C1
    assert assert_host(cloud, C1, [(third, gpu8, None)]) == {third: ADDRESSES}
    assert_host(cloud, C2, [(second, gpu8, None)])

    for sid in refused + [second, third]:
        delete(cloud, sid)
        assert arqs(cloud, sid) == [] and allocations(cloud, sid) == {}
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)


def test_two_four_gpu_instances_share_one_host(cloud):
    """Two 4-GPU instances on C1: four functions each, none shared, the pool's
    eight units allocated between them; a 2-GPU boot onto C1 is then No valid
    host. Deleting one gives its four back to the pool, the other keeps its own."""
    gpu4, gpu2 = cloud.flavors[4], cloud.flavors[2]
    a = boot(cloud, gpu4, C1)
    b = boot(cloud, gpu4, C1)
    for sid in (a, b):
        assert server(cloud, sid)['OS-EXT-SRV-ATTR:host'] == C1
    held = assert_host(cloud, C1, [(a, gpu4, None), (b, gpu4, None)])
    assert held[a] | held[b] == ADDRESSES and not held[a] & held[b], held
    assert_idle(cloud, C2)
    for sid in (a, b):
        host, given, _ = given_to_driver(cloud, sid)
        assert host == C1 and set(given) == held[sid], (given, held[sid])
    refused = boot_refused(cloud, gpu2, C1)
    assert_host(cloud, C1, [(a, gpu4, None), (b, gpu4, None)])

    delete(cloud, a)
    assert assert_host(cloud, C1, [(b, gpu4, None)]) == {b: held[b]}
    for sid in (b, refused):
        delete(cloud, sid)
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)


def require_resize():
    """The series lifts Nova's refusal to resize instances with accelerators,
    and Steward says how ARQs move (2.7): the resize runs as a resize."""
    assert cloud_mod.nova_supports('RESIZE'), 'contrib/nova does not lift the RESIZE block'
    assert cloud_mod.steward_says_how_arqs_move(), 'Steward below API 2.7'


def assert_mid_resize(cloud, sid, source, dest, old, new):
    """VERIFY_RESIZE: the destination holds the instance's new ARQs (new flavor's
    count) and its allocations; the source still holds its old ARQs and the
    migration's allocations (what a revert returns to). Returns (source's
    addresses, destination's)."""
    s = server(cloud, sid)
    assert (s['status'], s['OS-EXT-SRV-ATTR:host']) == ('VERIFY_RESIZE', dest), s
    assert s['flavor']['original_name'] == new.name
    assert len(arqs(cloud, sid)) == old.gpus + new.gpus
    on_dest = assert_host(cloud, dest, [(sid, new, None)])[sid]
    on_source = assert_host(cloud, source, [(sid, old, migration_uuid(cloud, sid))])[sid]
    # The destination's guest was built from the destination's ARQs.
    host, given, _ = given_to_driver(cloud, sid)
    assert host == dest and set(given) == on_dest, (host, given, on_dest)
    return on_source, on_dest


def assert_running(cloud, sid, host, flavor):
    s = server(cloud, sid)
    assert (s['status'], s['OS-EXT-SRV-ATTR:host']) == ('ACTIVE', host), s
    assert s['flavor']['original_name'] == flavor.name
    assert len(arqs(cloud, sid)) == flavor.gpus
    held = assert_host(cloud, host, [(sid, flavor, None)])[sid]
    assert_idle(cloud, C2 if host == C1 else C1)
    return held


def test_a_two_gpu_instance_resizes_to_four_and_back(cloud):
    """A 2-GPU instance on C1 resizes to the 4-GPU flavor: Nova's scheduler picks
    C2 (no resize to the same host), Steward binds four fresh functions of C2's
    pool while the instance keeps its two on C1 (the migration's allocation).
    Revert: back on C1 with its original two ARQs and functions (the fake
    driver's finish_revert_migration given them), C2 idle. Resize again and
    confirm: on C2 with four, C1 idle. Resize back to 2 and confirm: on C1 with
    two, C2 idle. Delete: both idle."""
    require_resize()
    gpu2, gpu4 = cloud.flavors[2], cloud.flavors[4]
    sid = boot(cloud, gpu2, C1)
    original = assert_running(cloud, sid, C1, gpu2)
    kept = {a['uuid'] for a in arqs(cloud, sid)}

    act(cloud, sid, {'resize': {'flavorRef': gpu4.id}}, 'VERIFY_RESIZE')
    on_source, _ = assert_mid_resize(cloud, sid, C1, C2, gpu2, gpu4)
    assert on_source == original
    act(cloud, sid, {'revertResize': None}, 'ACTIVE')
    assert assert_running(cloud, sid, C1, gpu2) == original
    assert {a['uuid'] for a in arqs(cloud, sid)} == kept
    host, given, uuids = given_to_driver(cloud, sid, 'finish_revert_migration')
    assert (host, set(given), uuids) == (C1, original, kept)

    act(cloud, sid, {'resize': {'flavorRef': gpu4.id}}, 'VERIFY_RESIZE')
    _, on_dest = assert_mid_resize(cloud, sid, C1, C2, gpu2, gpu4)
    bound_there = {a['uuid'] for a in arqs(cloud, sid) if a['hostname'] == C2}
    act(cloud, sid, {'confirmResize': None}, 'ACTIVE')
    assert assert_running(cloud, sid, C2, gpu4) == on_dest
    assert {a['uuid'] for a in arqs(cloud, sid)} == bound_there

    act(cloud, sid, {'resize': {'flavorRef': gpu2.id}}, 'VERIFY_RESIZE')
    _, on_dest = assert_mid_resize(cloud, sid, C2, C1, gpu4, gpu2)
    act(cloud, sid, {'confirmResize': None}, 'ACTIVE')
    assert assert_running(cloud, sid, C1, gpu2) == on_dest

    delete(cloud, sid)
    assert arqs(cloud, sid) == [] and allocations(cloud, sid) == {}
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)


def test_delete_returned_every_unit(cloud):
    """After every scenario's deletes: no ARQ, no server, each pool's usage 0 and
    nothing reserved, no allocation anywhere in either host's tree, all sixteen
    functions available."""
    assert arqs(cloud) == []
    with cloud.nova_client() as nova:
        r = nova.get('/servers', params={'all_tenants': 1})
    assert r.status_code == 200 and r.json()['servers'] == [], r.text
    for host in cloud_mod.HOSTS:
        view = host_view(cloud, host)
        assert view['usages'] == {RC: 0}, view
        assert view['inventory'][RC]['reserved'] == 0, view
        assert view['pool'] == {} and view['compute'] == {} and view['others'] == {}
        assert view['devices'] == {a: 'available' for a in ADDRESSES}, view

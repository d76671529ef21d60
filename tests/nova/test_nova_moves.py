"""The real Nova 34 moves instances with accelerators between two computes, against
Steward's multi-host services (tests/nova/cloud.py: Steward's API, conductor and an
agent on each compute host, RabbitMQ, PostgreSQL, one real Placement shared with
Nova; Nova's API, conductor, scheduler and two nova-compute on the fake virt driver,
with contrib/nova applied).

Every step is driven through Nova's REST API as an operator would, and after each
one ``assert_placed`` checks the whole picture: the server on the expected host; its
ARQs Bound there, to that host's device, for that instance (Steward's API); its
Placement allocations exactly the flavor on that compute node plus the ARQ's device;
nothing (ARQ, allocation, reservation) left on the other host, whose device is back
in service (``available``, unreserved in Placement).

Moves that Nova 34 refuses with accelerators (resize, cold and live migration,
suspend) run as moves: the series' patches 0004-0006 lift the refusal
(``SUPPORT_ACCELERATOR_SERVICE_FOR_*``) and Steward says how each device may move
(microversion 2.7, the ``live_migratable`` tag); a scenario fails if either is
missing. One deployment for the module; the scenarios run in order.
"""
import uuid

import pytest

from tests.fixtures.sysfs_tree import write_aer
from tests.multihost import cluster as cluster_mod
from tests.nova import cloud as cloud_mod
from tests.nova import series

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(series.XDIST_GROUP)]

C1, C2 = cloud_mod.HOSTS
IMAGE = '155d900f-4e14-4e4c-a73d-069cbf4541e6'      # Nova's GlanceFixture image
A_LATEST = {'OpenStack-API-Version': 'accelerator latest'}
RC_ADDRESS = {cloud_mod.FIXED_RC: cloud_mod.FIXED_ADDRESS,
              cloud_mod.LM_RC: cloud_mod.LM_ADDRESS}


@pytest.fixture(scope='module')
def cloud():
    cluster_mod.require()
    series.prepare()
    c = cloud_mod.NovaCloud().start()
    try:
        c.flavors = {}
        with c.api_client() as api:
            for name, rc in ((cloud_mod.FIXED_PROFILE, cloud_mod.FIXED_RC),
                             (cloud_mod.LM_PROFILE, cloud_mod.LM_RC)):
                r = api.post('/v2/device_profiles', json=[{
                    'name': name, 'groups': [{f'resources:{rc}': '1'}]}])
                assert r.status_code == 201, r.text
        for name, profile, vcpus in (('acc', cloud_mod.FIXED_PROFILE, 1),
                                     ('acc-lm', cloud_mod.LM_PROFILE, 1),
                                     ('acc-lm-big', cloud_mod.LM_PROFILE, 2)):
            c.flavors[name] = Flavor(c, name, profile, vcpus)
        yield c
    finally:
        c.stop()


class Flavor:
    """A Nova flavor asking for one device through ``accel:device_profile``."""

    def __init__(self, cloud, name, profile, vcpus, ram=512, disk=1):
        self.name, self.vcpus, self.ram, self.disk = name, vcpus, ram, disk
        self.rc = {cloud_mod.FIXED_PROFILE: cloud_mod.FIXED_RC,
                   cloud_mod.LM_PROFILE: cloud_mod.LM_RC}[profile]
        self.id = cloud_mod.create_flavor(cloud, name, profile, vcpus, ram, disk)

    def compute_resources(self):
        return {'VCPU': self.vcpus, 'MEMORY_MB': self.ram, 'DISK_GB': self.disk}


# -- Nova, as an operator drives it ---------------------------------------------------
server, wait_server = cloud_mod.server, cloud_mod.wait_server
arqs, allocations = cloud_mod.arqs, cloud_mod.allocations


def boot(cloud, flavor, host):
    with cloud.nova_client() as nova:
        r = nova.post('/servers', json={'server': {
            'name': f'acc-{uuid.uuid4().hex[:6]}', 'imageRef': IMAGE,
            'flavorRef': flavor.id, 'networks': 'none', 'host': host}})
    assert r.status_code == 202, r.text
    sid = r.json()['server']['id']
    wait_server(cloud, sid, 'ACTIVE')
    return sid


def action(cloud, sid, body):
    with cloud.nova_client() as nova:
        return nova.post(f'/servers/{sid}/action', json=body)


def act(cloud, sid, body, status):
    """The server action ``body``, then the server in ``status`` and every event of
    Nova's record of the action finished (a compute's part may go on after the
    status changes: the source's cleanup of a confirm, for one)."""
    r = action(cloud, sid, body)
    assert r.status_code in (200, 202, 204), r.text
    wait_server(cloud, sid, status)
    name = list(body)[0]
    events = cloud_mod.wait_until(lambda: action_finished(cloud, sid, name), bool,
                                  f'{name} finished')
    assert {e['result'] for e in events} == {'Success'}, events


def delete(cloud, sid):
    with cloud.nova_client() as nova:
        assert nova.delete(f'/servers/{sid}').status_code == 204
        cloud_mod.wait_until(lambda: nova.get(f'/servers/{sid}').status_code,
                             lambda code: code == 404, f'server {sid} deleted')


def require(what):
    """The series in contrib/nova lifts Nova's refusal of ``what`` (RESIZE covers
    resize and cold migration) and Steward says how ARQs move (2.7): every move
    scenario runs as a move, none is taken for a refusal."""
    assert cloud_mod.nova_supports(what), f'contrib/nova does not lift the {what} block'
    assert cloud_mod.steward_says_how_arqs_move(), 'Steward below API 2.7'


def assert_refusal(cloud, sid, r, expected):
    """Nova refused the action ``r`` answers with ``expected`` in its reason: the
    API's 400, or for a live migration, whose checks run in the conductor after the
    API's 202, the failed pre-check event of Nova's instance action; the server
    ACTIVE where it was."""
    if r.status_code == 202:
        details = cloud_mod.wait_until(
            lambda: failed_events(cloud, sid, 'live-migration'), bool,
            'the live migration refused')
        assert len(details) == 1 and expected in details[0], details
        wait_server(cloud, sid, 'ACTIVE')
        return
    assert r.status_code == 400, r.text
    assert expected in r.json()['badRequest']['message'], r.text


# -- what Steward and Placement hold ---------------------------------------------------
def host_usage(cloud, host):
    """{provider: {consumer: resources}} of every provider in ``host``'s tree that
    holds anything, and the device reservations: {provider: {rc: reserved}}."""
    used, reserved = {}, {}
    with cloud.placement_client() as p:
        tree = p.get('/resource_providers', params={
            'in_tree': cloud.compute_rps[host]}).json()['resource_providers']
        for rp in tree:
            allocs = p.get(f'/resource_providers/{rp["uuid"]}/allocations').json()
            if allocs['allocations']:
                used[rp['uuid']] = {c: a['resources']
                                    for c, a in allocs['allocations'].items()}
            inv = p.get(f'/resource_providers/{rp["uuid"]}/inventories').json()
            for rc, i in inv['inventories'].items():
                if i['reserved'] and rc.startswith('CUSTOM_PCI_'):
                    reserved.setdefault(rp['uuid'], {})[rc] = i['reserved']
    return used, reserved


def device_states(cloud, host):
    """{PCI address: device_state} of ``host``'s devices."""
    with cloud.api_client() as api:
        devices = api.get('/v2/devices', params={'hostname': host},
                          headers=A_LATEST).json()['devices']
    out = {}
    for d in devices:
        for address in RC_ADDRESS.values():
            if address in d['std_board_info']:
                out[address] = d['device_state']
    return out


def assert_idle(cloud, host):
    """Nothing of any instance on ``host``: no ARQ, no allocation, no reservation,
    both devices available (a released device's reservation is lifted by the
    conductor after the release: waited for)."""
    assert [a['uuid'] for a in arqs(cloud) if a['hostname'] == host] == []
    assert cloud_mod.wait_until(lambda: host_usage(cloud, host),
                                lambda u: u == ({}, {}), f'{host} idle') == ({}, {})
    states = cloud_mod.wait_until(
        lambda: device_states(cloud, host),
        lambda s: set(s.values()) == {'available'}, f'{host} devices available')
    assert len(states) == 2, states


def assert_holds(cloud, sid, host, flavor, consumer=None):
    """``host`` holds ``sid``'s ARQ (Bound there, to its device for ``flavor``'s
    resource class) and the Placement allocations of ``consumer`` (the instance, or
    the migration record holding the source during a move): the flavor on the
    compute node and one unit of the ARQ's device, which is reserved and allocated
    in Steward. Returns the ARQ."""
    here = [a for a in arqs(cloud, sid) if a['hostname'] == host]
    assert [(a['state'], a['instance_uuid']) for a in here] == [('Bound', sid)], here
    (arq,) = here
    device_rp = cloud.device_rp(host, RC_ADDRESS[flavor.rc])
    assert arq['device_rp_uuid'] == device_rp
    assert allocations(cloud, consumer or sid) == {
        cloud.compute_rps[host]: flavor.compute_resources(),
        device_rp: {flavor.rc: 1}}
    used, reserved = host_usage(cloud, host)
    assert set(used) == {cloud.compute_rps[host], device_rp}, used
    assert reserved == {device_rp: {flavor.rc: 1}}
    assert device_states(cloud, host)[RC_ADDRESS[flavor.rc]] == 'allocated'
    return arq


def assert_placed(cloud, sid, host, flavor):
    """The server runs on ``host`` with its one ARQ there, and the other host holds
    nothing."""
    s = server(cloud, sid)
    assert s['OS-EXT-SRV-ATTR:host'] == host, s
    assert s['flavor']['original_name'] == flavor.name
    assert len(arqs(cloud, sid)) == 1
    assert_holds(cloud, sid, host, flavor)
    assert_idle(cloud, C2 if host == C1 else C1)


def migration(cloud, sid):
    """The server's newest migration record (Nova's consumer for the source side of
    a move)."""
    with cloud.nova_client() as nova:
        r = nova.get(f'/servers/{sid}/migrations')
        if r.status_code == 200 and r.json()['migrations']:
            return r.json()['migrations'][0]
    return sorted(migrations(cloud, sid), key=lambda m: m['created_at'])[-1]


def migrations(cloud, sid):
    """Every migration record of the server, in progress or not."""
    with cloud.nova_client() as nova:
        r = nova.get('/os-migrations', params={'instance_uuid': sid})
    assert r.status_code == 200, r.text
    return r.json()['migrations']


FINAL = ('completed', 'error', 'failed', 'cancelled')


def migration_ids(cloud, sid):
    return {m['id'] for m in migrations(cloud, sid)}


def migration_ended(cloud, sid, before):
    """The migration record started after ``before`` (the ids there were) once it
    reached a final status. Nova's action events are not enough to know a live
    migration has ended: the conductor's event finishes when it has cast the move
    to the source compute, whose own event only starts when the cast arrives, so
    for a moment every event there is has finished (a test that let the fake
    hypervisor succeed again in that moment saw its "failing" migration complete)."""
    def ended():
        new = [m for m in migrations(cloud, sid) if m['id'] not in before]
        newest = max(new, key=lambda m: m['id'], default=None)
        return newest if newest and newest['status'] in FINAL else None
    return cloud_mod.wait_until(ended, bool, f'the migration of {sid} ended')


def failed_events(cloud, sid, name):
    """The details of the failed events of the server's instance action ``name``
    (compute API 2.84 and later show them)."""
    return [e.get('details') for e in action_events(cloud, sid, name)
            if e['result'] == 'Error']


def action_finished(cloud, sid, name):
    """The events of the server's action ``name`` once every one has finished (Nova
    records the compute's part of a move as an event that ends with it)."""
    events = action_events(cloud, sid, name)
    return events if events and all(e['finish_time'] for e in events) else None


def action_events(cloud, sid, name):
    with cloud.nova_client() as nova:
        actions = nova.get(f'/servers/{sid}/os-instance-actions').json()
        found = sorted((a['start_time'], a['request_id'])
                       for a in actions['instanceActions'] if a['action'] == name)
        if not found:
            return []
        request_id = found[-1][1]           # the newest
        r = nova.get(f'/servers/{sid}/os-instance-actions/{request_id}')
    assert r.status_code == 200, r.text
    return r.json()['instanceAction']['events']


def assert_mid_resize(cloud, sid, source, dest, old, new):
    """VERIFY_RESIZE: the destination holds the instance (new flavor, new ARQ
    bound there), the source still holds the migration's allocations and its ARQ
    (what a revert returns to)."""
    s = server(cloud, sid)
    assert (s['status'], s['OS-EXT-SRV-ATTR:host']) == ('VERIFY_RESIZE', dest), s
    assert len(arqs(cloud, sid)) == 2
    assert_holds(cloud, sid, dest, new)
    assert_holds(cloud, sid, source, old, consumer=migration(cloud, sid)['uuid'])


# -- the scenarios, in order ------------------------------------------------------------
def test_boot_shelve_unshelve_delete(cloud):
    """Boot on C1: its ARQ Bound there. Shelve (offloaded at once: Nova deletes the
    ARQ and the allocations), then unshelve onto C2: a fresh ARQ Bound on C2, C1
    idle. Delete: nothing left anywhere. Works with the released Nova."""
    flavor = cloud.flavors['acc']
    sid = boot(cloud, flavor, C1)
    assert_placed(cloud, sid, C1, flavor)
    first = arqs(cloud, sid)[0]['uuid']
    act(cloud, sid, {'shelve': None}, 'SHELVED_OFFLOADED')
    assert arqs(cloud, sid) == [] and allocations(cloud, sid) == {}
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)
    act(cloud, sid, {'unshelve': {'host': C2}}, 'ACTIVE')
    assert_placed(cloud, sid, C2, flavor)
    assert arqs(cloud, sid)[0]['uuid'] != first
    delete(cloud, sid)
    assert arqs(cloud, sid) == [] and allocations(cloud, sid) == {}
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)


@pytest.fixture(scope='module')
def lm_server(cloud):
    """The live-migratable instance the move scenarios carry from host to host."""
    flavor = cloud.flavors['acc-lm']
    sid = boot(cloud, flavor, C1)
    assert_placed(cloud, sid, C1, flavor)
    state = {'sid': sid, 'host': C1, 'flavor': flavor}
    yield state
    delete(cloud, sid)
    assert_idle(cloud, C1)
    assert_idle(cloud, C2)


def other(host):
    return C2 if host == C1 else C1


def test_resize_revert(cloud, lm_server):
    """Resize to a bigger flavor (same device profile): a new ARQ bound on the other
    host before the guest is built there, both sets held in VERIFY_RESIZE; revert:
    back on the source with its original ARQ, the destination's deleted and its
    device back in service."""
    sid, source, old = lm_server['sid'], lm_server['host'], lm_server['flavor']
    new = cloud.flavors['acc-lm-big']
    body = {'resize': {'flavorRef': new.id}}
    require('RESIZE')
    kept = arqs(cloud, sid)[0]['uuid']
    act(cloud, sid, body, 'VERIFY_RESIZE')
    assert_mid_resize(cloud, sid, source, other(source), old, new)
    act(cloud, sid, {'revertResize': None}, 'ACTIVE')
    assert_placed(cloud, sid, source, old)
    assert arqs(cloud, sid)[0]['uuid'] == kept


def test_resize_confirm(cloud, lm_server):
    """Resize again and confirm: the instance on the other host with the new flavor
    and the destination's ARQ, the source's ARQ deleted and its device back in
    service."""
    sid, source = lm_server['sid'], lm_server['host']
    new = cloud.flavors['acc-lm-big']
    body = {'resize': {'flavorRef': new.id}}
    require('RESIZE')
    act(cloud, sid, body, 'VERIFY_RESIZE')
    dest = other(source)
    bound_there = [a['uuid'] for a in arqs(cloud, sid) if a['hostname'] == dest]
    act(cloud, sid, {'confirmResize': None}, 'ACTIVE')
    assert_placed(cloud, sid, dest, new)
    assert [a['uuid'] for a in arqs(cloud, sid)] == bound_there
    lm_server.update(host=dest, flavor=new)


def test_cold_migrate(cloud, lm_server):
    """Cold migrate (same flavor) to the other host, then confirm: the ARQ on the
    destination, nothing left on the source."""
    sid, source, flavor = lm_server['sid'], lm_server['host'], lm_server['flavor']
    dest = other(source)
    body = {'migrate': {'host': dest}}
    require('RESIZE')
    act(cloud, sid, body, 'VERIFY_RESIZE')
    assert_mid_resize(cloud, sid, source, dest, flavor, flavor)
    act(cloud, sid, {'confirmResize': None}, 'ACTIVE')
    assert_placed(cloud, sid, dest, flavor)
    lm_server.update(host=dest)


def live_migrate(cloud, sid, dest):
    return action(cloud, sid, {'os-migrateLive': {'host': dest,
                                                  'block_migration': 'auto'}})


def test_live_migrate_rolled_back(cloud, lm_server):
    """A live migration whose hypervisor part fails: Nova rolls it back. The ARQ the
    conductor bound on the destination is deleted and its device back in service;
    the instance keeps its source ARQ, allocations and host."""
    sid, source, flavor = lm_server['sid'], lm_server['host'], lm_server['flavor']
    dest = other(source)
    require('LIVE_MIGRATION')
    kept = arqs(cloud, sid)[0]['uuid']
    before = migration_ids(cloud, sid)
    cloud.nova.fail_live_migrations(True)
    try:
        r = live_migrate(cloud, sid, dest)
        assert r.status_code == 202, r.text
        ended = migration_ended(cloud, sid, before)
    finally:
        cloud.nova.fail_live_migrations(False)
    assert ended['status'] in ('error', 'failed'), (ended, cloud.logs_tail())
    cloud_mod.wait_until(lambda: action_finished(cloud, sid, 'live-migration'),
                         bool, 'the live migration rolled back')
    wait_server(cloud, sid, 'ACTIVE')
    assert_placed(cloud, sid, source, flavor)
    assert arqs(cloud, sid)[0]['uuid'] == kept


def test_live_migrate_live_migratable(cloud, lm_server):
    """Live migrate the instance whose device Steward tags live_migratable: the
    destination's ARQ bound before the move, the source's released after it."""
    sid, source, flavor = lm_server['sid'], lm_server['host'], lm_server['flavor']
    dest = other(source)
    require('LIVE_MIGRATION')
    before = migration_ids(cloud, sid)
    r = live_migrate(cloud, sid, dest)
    assert r.status_code == 202, r.text
    ended = migration_ended(cloud, sid, before)
    # The instance reaches the destination before the source's part ends (which
    # releases the source's ARQs): done when Nova's action says so.
    events = cloud_mod.wait_until(lambda: action_finished(cloud, sid, 'live-migration'),
                                  bool, 'the live migration finished')
    assert ended['status'] == 'completed' and {e['result'] for e in events} == {
        'Success'}, (ended, events, cloud.logs_tail())
    wait_server(cloud, sid, 'ACTIVE')
    assert_placed(cloud, sid, dest, flavor)
    lm_server.update(host=dest)


def test_suspend_resume(cloud, lm_server):
    """Suspend and resume keep the ARQ, the allocations and the host."""
    sid, host, flavor = lm_server['sid'], lm_server['host'], lm_server['flavor']
    require('SUSPEND')
    kept = arqs(cloud, sid)[0]['uuid']
    act(cloud, sid, {'suspend': None}, 'SUSPENDED')
    assert_placed(cloud, sid, host, flavor)
    act(cloud, sid, {'resume': None}, 'ACTIVE')
    assert_placed(cloud, sid, host, flavor)
    assert arqs(cloud, sid)[0]['uuid'] == kept


def test_live_migrate_refused_for_a_device_that_cannot_move(cloud, lm_server):
    """An instance whose device is not tagged live_migratable: Nova refuses to live
    migrate it (with the series, for the reason Steward gives), and nothing moved:
    its ARQ still Bound on its host, its allocations there, the other host holding
    only the live-migratable instance."""
    flavor = cloud.flavors['acc']
    host = other(lm_server['host'])
    sid = boot(cloud, flavor, host)
    assert_holds(cloud, sid, host, flavor)
    r = live_migrate(cloud, sid, other(host))
    require('LIVE_MIGRATION')
    # Steward's reason (its move_refusal) in patch 0003's message.
    assert_refusal(cloud, sid, r, 'may not move with the instance: PCI device not '
                                  'tagged live_migratable')
    s = server(cloud, sid)
    assert (s['status'], s['OS-EXT-SRV-ATTR:host']) == ('ACTIVE', host), s
    assert len(arqs(cloud, sid)) == 1
    assert_holds(cloud, sid, host, flavor)
    delete(cloud, sid)
    assert arqs(cloud, sid) == []
    assert allocations(cloud, sid) == {}


def test_a_boot_never_lands_on_an_unhealthy_device(cloud):
    """Issue 38 through the real Nova 34: C1's fixed-product function reports a
    fatal AER error (the kernel's counter in its sysfs tree). Within a discovery
    it leaves Placement's free capacity; Nova's scheduler, with no host named,
    puts the next boot on C2's healthy function, and once that one is taken no
    host is valid: the unhealthy device is never handed out. Last of the module:
    the device stays out of service (only an operator brings it back)."""
    flavor = cloud.flavors['acc']
    path = cloud.sysfs_for(C1) / 'devices' / 'pci0000:00' / cloud_mod.FIXED_ADDRESS
    write_aer(path, fatal={'Surprise Down Error': 1})
    sick = cloud.device_rp(C1, cloud_mod.FIXED_ADDRESS)
    cloud_mod.wait_until(lambda: host_usage(cloud, C1)[1].get(sick, {}),
                         lambda reserved: reserved == {flavor.rc: 1},
                         'the unhealthy function reserved in Placement')
    with cloud.api_client() as api:
        devices = api.get('/v2/devices', params={'hostname': C1},
                          headers=A_LATEST).json()['devices']
    (device,) = [d for d in devices if cloud_mod.FIXED_ADDRESS in d['std_board_info']]
    health = device['health']
    assert health['state'] == 'unhealthy' and 'pci.aer_fatal' in health['fault'], health

    def boot_anywhere():
        with cloud.nova_client() as nova:
            r = nova.post('/servers', json={'server': {
                'name': f'acc-{uuid.uuid4().hex[:6]}', 'imageRef': IMAGE,
                'flavorRef': flavor.id, 'networks': 'none'}})
        assert r.status_code == 202, r.text
        return r.json()['server']['id']

    first = boot_anywhere()
    s = wait_server(cloud, first, 'ACTIVE')
    assert s['OS-EXT-SRV-ATTR:host'] == C2, s
    healthy = cloud.device_rp(C2, cloud_mod.FIXED_ADDRESS)
    assert [(a['state'], a['device_rp_uuid']) for a in arqs(cloud, first)] == [
        ('Bound', healthy)]
    assert allocations(cloud, first) == {
        cloud.compute_rps[C2]: flavor.compute_resources(), healthy: {flavor.rc: 1}}
    second = boot_anywhere()
    s = wait_server(cloud, second, 'ERROR')
    assert 'No valid host' in s['fault']['message'], s['fault']
    assert arqs(cloud, second) == [] and allocations(cloud, second) == {}
    used, _ = host_usage(cloud, C1)
    assert sick not in used
    delete(cloud, second)
    delete(cloud, first)
    # The operator brings it back, and not before the condition cleared: refused
    # while the driver still reads it unhealthy; the function re-enumerated (its
    # counters read 0 again), read healthy at a discovery, then back in service.
    with cloud.api_client() as api:
        r = api.post(f'/v2/devices/{device["uuid"]}/clean', headers=A_LATEST)
        assert r.status_code == 409, r.text
        assert r.json()['error_code'] == 'cyb.device.still_unhealthy', r.text
        write_aer(path)
        cloud_mod.wait_until(
            lambda: api.get(f'/v2/devices/{device["uuid"]}',
                            headers=A_LATEST).json()['health']['state'],
            lambda state: state == 'ok', 'the function read healthy again')
        r = api.post(f'/v2/devices/{device["uuid"]}/clean', headers=A_LATEST)
        assert r.status_code == 202, r.text
    # (The module's live-migratable server may hold C1's other function.)
    cloud_mod.wait_until(lambda: host_usage(cloud, C1)[1].get(sick),
                         lambda reserved: reserved is None, 'the reservation lifted')
    assert device_states(cloud, C1)[cloud_mod.FIXED_ADDRESS] == 'available'

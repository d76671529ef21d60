"""PlacementClient.sync_providers (many providers of one tree at once) against the
real embedded Placement: creation without reads, traits in parallel, inventories
in one POST /reshaper, and the fallbacks to sync_provider when Placement disagrees."""
import uuid

from steward.common import exception
from steward.placement import tree_sync
from steward.placement.client import PlacementClient
from steward.placement.provider_sync import OWNER_TRAIT, ProviderSpec
from tests.fixtures.placement_fixture import admin, client, placement, root  # noqa: F401
from tests.fixtures.placement_fixture import unique_name

N = tree_sync._RESHAPE_MIN * 3


def _specs(root, n=N, total=4, **kw):
    tag = uuid.uuid4().hex[:8].upper()
    names = [unique_name('dev') for _ in range(n)]
    return [ProviderSpec(uuid=str(uuid.uuid3(uuid.NAMESPACE_DNS, name)), name=name,
                         parent_uuid=root, resource_class=f'CUSTOM_RC_{tag}',
                         total=total, traits=frozenset({OWNER_TRAIT, f'CUSTOM_T_{tag}'}),
                         **kw) for name in names]


def _state(admin, rp_uuid):
    inv = admin.get(f'/resource_providers/{rp_uuid}/inventories').json()
    traits = admin.get(f'/resource_providers/{rp_uuid}/traits').json()
    return inv['inventories'], set(traits['traits'])


def _requests(client, before):
    return (client.stats['reads'] - before['reads'],
            client.stats['writes'] - before['writes'])


def test_new_providers_take_two_writes_each_and_one_reshape(client, admin, root):
    specs = _specs(root)
    before = dict(client.stats)
    writes, errors = client.sync_providers(specs)
    assert errors == {}
    # POST and traits PUT per provider, the custom trait and class once, one
    # reshape; reads: the tree before. The generations after the reshape are
    # counted for providers this sync created (test below: they are right).
    assert writes == 2 * N + 3
    assert _requests(client, before) == (1, 2 * N + 3)
    for spec in specs:
        inventories, traits = _state(admin, spec.uuid)
        assert traits == set(spec.traits)
        assert inventories[spec.resource_class]['total'] == 4
        assert inventories[spec.resource_class]['reserved'] == 0


def test_second_sync_and_restart_write_nothing(client, placement, root):
    specs = _specs(root)
    client.sync_providers(specs)
    before = dict(client.stats)
    assert client.sync_providers(specs) == (0, {})
    assert client.stats == before            # the reshape's generations were learnt
    restarted = PlacementClient.from_conf(endpoint=placement.url)
    assert restarted.sync_providers(specs) == (0, {})
    assert restarted.stats['writes'] == 0


def test_generations_learnt_from_the_reshape_are_right(client, admin, root):
    specs = _specs(root)
    client.sync_providers(specs)
    before = dict(client.stats)
    assert client.set_reserved(specs[0].uuid, specs[0].resource_class, 'total') == 4
    # One PUT with the remembered generation: no re-read, no 409.
    assert _requests(client, before) == (0, 1)
    assert client.stats['errors'] == before['errors']
    assert _state(admin, specs[0].uuid)[0][specs[0].resource_class]['reserved'] == 4


def test_reserved_now_is_read_for_the_reshape(client, admin, root):
    specs = _specs(root)
    asked = []

    def reserved_now(chunk):
        asked.append(len(chunk))
        return {chunk[0].uuid: 'total', chunk[1].uuid: 1}

    assert client.sync_providers(specs, reserved_now=reserved_now)[1] == {}
    assert asked == [N]
    rc = specs[0].resource_class
    assert _state(admin, specs[0].uuid)[0][rc]['reserved'] == 4
    assert _state(admin, specs[1].uuid)[0][rc]['reserved'] == 1
    assert _state(admin, specs[2].uuid)[0][rc]['reserved'] == 0


def test_conflict_in_a_reshape_falls_back_to_one_by_one(client, admin, root):
    specs = _specs(root)
    client.sync_providers(specs)
    # Someone else writes one provider: the client's generation for it is stale.
    rc = specs[0].resource_class
    body = admin.get(f'/resource_providers/{specs[0].uuid}/inventories').json()
    resp = admin.put(f'/resource_providers/{specs[0].uuid}/inventories/{rc}', json={
        'resource_provider_generation': body['resource_provider_generation'],
        'total': 4, 'reserved': 3})
    assert resp.status_code == 200, resp.text
    bigger = [ProviderSpec(**{**s.__dict__, 'total': 6}) for s in specs]
    writes, errors = client.sync_providers(bigger)
    assert errors == {}
    # The refused reshape, then a PUT each (the stale one after a 409 and a re-read).
    assert writes == 1 + N
    for spec in bigger:
        assert _state(admin, spec.uuid)[0][rc]['total'] == 6
    assert _state(admin, specs[0].uuid)[0][rc]['reserved'] == 3     # kept


def test_foreign_name_is_an_error_of_that_provider_only(client, admin, root):
    specs = _specs(root)
    foreign = admin.post('/resource_providers', json={
        'name': specs[0].name, 'uuid': str(uuid.uuid4()), 'parent_provider_uuid': root})
    assert foreign.status_code == 200, foreign.text
    writes, errors = client.sync_providers(specs)
    assert set(errors) == {specs[0].uuid}
    assert isinstance(errors[specs[0].uuid], exception.PlacementOwnershipConflict)
    for spec in specs[1:]:
        assert _state(admin, spec.uuid)[1] == set(spec.traits)


def test_without_the_service_role_inventories_go_one_by_one(placement, admin, root):
    client = PlacementClient.from_conf(endpoint=placement.url)
    # A deployment whose Steward user lacks the service role the reshaper needs.
    client._http.adapter.additional_headers = {'X-Roles': 'admin'}
    specs = _specs(root)
    writes, errors = client.sync_providers(specs)
    assert errors == {}
    assert writes == 3 * N + 3          # POST, traits, inventory each; one refused reshape
    more = [ProviderSpec(**{**s.__dict__, 'total': 5}) for s in specs]
    assert client.sync_providers(more) == (N, {})    # no second reshape attempt
    for spec in more:
        assert _state(admin, spec.uuid)[0][spec.resource_class]['total'] == 5


def test_after_a_refused_reshape_reserved_is_read_again_at_write_time(client, admin,
                                                                      root):
    """The one-by-one writes after a refused reshape evaluate each spec's own
    reserved callable, not the value read for the reshape (the device may have
    changed state in between)."""
    specs = _specs(root)
    client.sync_providers(specs)
    rc = specs[0].resource_class
    body = admin.get(f'/resource_providers/{specs[0].uuid}/inventories').json()
    assert admin.put(f'/resource_providers/{specs[0].uuid}/inventories/{rc}', json={
        'resource_provider_generation': body['resource_provider_generation'],
        'total': 4, 'reserved': 3}).status_code == 200     # its generation moves
    now = [1]
    bigger = [ProviderSpec(**{**s.__dict__, 'total': 6, 'reserved': lambda: now[0]})
              for s in specs]

    def reserved_now(chunk):
        values = {s.uuid: now[0] for s in chunk}
        now[0] = 2               # the state changes after the reshape's read
        return values

    assert client.sync_providers(bigger, reserved_now=reserved_now)[1] == {}
    for spec in bigger:
        assert _state(admin, spec.uuid)[0][rc]['reserved'] == 2

"""When the first registrations of a burst list every provider instead of
reading each host's compute node and tree (steward/conductor/report/trees.py)."""
from steward.common import exception
from steward.conductor.report import trees


class Listing:
    """Placement's answer to GET /resource_providers: ``hosts`` compute nodes,
    each with one child."""

    def __init__(self, hosts):
        self.providers = []
        for i in range(hosts):
            self.add(f'host-{i}')
        self.calls = 0
        self.error = None

    def add(self, name):
        root = f'{name}-uuid'
        self.providers += [
            {'uuid': root, 'name': name, 'parent_provider_uuid': None,
             'root_provider_uuid': root},
            {'uuid': f'{name}-child', 'name': f'{name}_child',
             'parent_provider_uuid': root, 'root_provider_uuid': root}]

    def list_providers(self, **query):
        assert query == {}          # every provider, no filter
        self.calls += 1
        if self.error:
            raise self.error
        return list(self.providers)


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def test_a_few_hosts_are_looked_up_alone():
    placement = Listing(20)
    t = trees.Trees(placement, clock=Clock())
    assert t.lookup(['host-1', 'host-2']) == {}
    assert placement.calls == 0


def test_a_burst_lists_once_and_answers_with_each_tree():
    placement = Listing(20)
    clock = Clock()
    t = trees.Trees(placement, clock=clock)
    names = [f'host-{i}' for i in range(trees.MIN_HOSTS)]
    found = t.lookup(names)
    assert placement.calls == 1
    assert set(found) == set(names)
    root, tree = found['host-3']
    assert root == 'host-3-uuid'
    assert {rp['uuid'] for rp in tree} == {'host-3-uuid', 'host-3-child'}
    # Fresh: the next batches are answered from it, a name not in it is not.
    clock.now += trees.MAX_AGE
    assert set(t.lookup(['host-99', 'host-0'])) == {'host-0'}
    assert placement.calls == 1


def test_an_old_listing_answers_nothing_and_is_taken_again_while_it_pays():
    placement = Listing(20)
    clock = Clock()
    t = trees.Trees(placement, clock=clock)
    t.lookup([f'host-{i}' for i in range(trees.MIN_HOSTS)])
    placement.add('host-new')
    clock.now += trees.MAX_AGE + 1
    # The hosts asked for within MAX_AGE (these two) against the listing's size
    # (42 providers): two hosts' reads cost less than 42 providers listed? No:
    # 2 * PROVIDERS_PER_HOST >= 42, so it is taken again, new host and all.
    assert set(t.lookup(['host-new', 'host-1'])) == {'host-new', 'host-1'}
    assert placement.calls == 2


def test_a_large_listing_is_not_taken_for_a_trickle():
    placement = Listing(trees.PROVIDERS_PER_HOST * 2)     # 2 providers a host
    clock = Clock()
    t = trees.Trees(placement, clock=clock)
    t.lookup([f'host-{i}' for i in range(trees.MIN_HOSTS)])
    assert placement.calls == 1
    clock.now += trees.MAX_AGE + 1
    # 3 hosts asked for in MAX_AGE: their reads cost less than 240 providers listed.
    for i in range(3):
        assert t.lookup([f'host-{i}']) == {}
    assert placement.calls == 1
    # A fourth within the window makes it pay (4 * 60 >= 240).
    assert set(t.lookup(['host-3'])) == {'host-3'}
    assert placement.calls == 2


def test_a_failed_listing_leaves_each_host_to_its_own_reads():
    placement = Listing(20)
    placement.error = exception.PlacementError(call='GET /resource_providers',
                                               reason='HTTP 503')
    t = trees.Trees(placement, clock=Clock())
    assert t.lookup([f'host-{i}' for i in range(trees.MIN_HOSTS)]) == {}
    placement.error = None
    assert len(t.lookup([f'host-{i}' for i in range(trees.MIN_HOSTS)])) == trees.MIN_HOSTS

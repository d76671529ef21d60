"""The conductor's clients belong to the conductor object: no module of
steward/conductor keeps one, and metrics learn about them only through what a
conductor registers."""
import ast
import pathlib

import steward
from steward import metrics
from steward.conductor.manager import ConductorManager
from tests.unit.test_import_cycles import import_graph

CONDUCTOR = pathlib.Path(steward.__file__).parent / 'conductor'


def test_no_module_of_the_conductor_holds_state():
    found = []
    for path in sorted(CONDUCTOR.glob('*.py')):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found.append(f'{path.name}:{node.lineno} global {node.names}')
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                # Constants (UPPER_CASE) and the logger only.
                if isinstance(target, ast.Name) and target.id != 'LOG' and \
                        not target.id.isupper():
                    found.append(f'{path.name}:{node.lineno} {target.id}')
    assert not found, found


def test_metrics_import_nothing_of_the_conductor():
    graph = import_graph()
    assert not {m for m in graph['steward.metrics'] if m.startswith('steward.conductor')}


class _Client:
    def __init__(self, reads):
        self.stats = {'reads': reads, 'writes': 0, 'errors': 0}


def _family(provider=None):
    return {m.name: m for m in metrics.PlacementCollector(provider).collect()}


def test_each_conductor_owns_its_clients_and_the_last_started_one_reports():
    first = ConductorManager(None, _Client(1))
    second = ConductorManager(None, None, metrics=first.metrics)
    assert first.clients.placement() is first.placement
    assert second.clients.placement_client is None
    assert first.agent_api is not second.agent_api
    got = _family(first.placement_stats)['steward_placement_requests']
    assert {s.labels['kind']: s.value for s in got.samples} == {'read': 1, 'write': 0}
    # A conductor without Placement reports no family.
    assert _family(second.placement_stats) == {}
    # Both report to the Metrics the composition root gave them; the last
    # conductor registered is the one reported.
    shared = first.metrics
    assert second.metrics is shared
    shared.register_placement_stats(first.placement_stats)
    assert shared.placement.registered() == first.placement_stats
    shared.register_placement_stats(second.placement_stats)
    assert shared.placement.registered() == second.placement_stats
    shared.unregister_placement_stats(second.placement_stats)
    assert shared.placement.registered() == first.placement_stats
    shared.unregister_placement_stats(first.placement_stats)
    assert shared.placement.registered() is None


def test_a_conductor_built_alone_has_metrics_of_its_own():
    assert ConductorManager(None).metrics is not ConductorManager(None).metrics

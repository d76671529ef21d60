"""What the conductor works with is one Deps (steward/conductor/deps.py), built
by the composition root (steward/cmd) alone and owned by one conductor object (or
one ARQService: the ARQ operations, steward/arqs, take the same Deps wherever they
run): no module of steward/conductor or steward/arqs keeps or builds a client,
no module outside
steward/cmd builds a Database, a Transport, a PlacementClient or the Deps, nor the
process's Metrics or the API's policy Enforcer (create_app is handed them), and
metrics learn about a conductor only through what it registers."""
import ast
import dataclasses
import pathlib

import pytest

import steward
from steward import metrics
from steward.conductor import deps as conductor_deps
from steward.conductor.manager import ConductorManager
from tests.unit.structure import astnames
from tests.unit.structure.test_import_cycles import import_graph

STEWARD = pathlib.Path(steward.__file__).parent
CONDUCTOR = STEWARD / 'conductor'
# The ARQ operations, moved out of the conductor (issue 54): held to its rules.
ARQS = STEWARD / 'arqs'
# What only the composition root builds, anywhere in steward.
ROOT_ONLY = {'Deps', 'Database', 'Transport', 'PlacementClient'}
# Besides, what the conductor is handed and never builds (the Deps' fields).
HANDED_TO_THE_CONDUCTOR = ROOT_ONLY | {'Metrics', 'NovaNotifier', 'ServerLookup',
                                       'AgentAPI', 'ConductorAPI', 'LocalConductorAPI',
                                       'ArqRPCAPI', 'LocalArqAPI'}
# What only the composition root builds either, known by where the name called
# comes from: oslo.policy's own Enforcer (wrapped by steward.api.policy's, and
# built by the oslopolicy tools' entry point, steward/common/policy.py) is not one.
ROOT_ONLY_BY_MODULE = {'steward.metrics.Metrics', 'steward.api.policy.Enforcer'}
# Alembic's own command line (``alembic upgrade`` without steward-manage) is a
# composition root of its own: it builds the configured Database.
OTHER_ROOTS = {'db/migrations/env.py'}


def _conductor_and_arqs():
    paths = sorted(CONDUCTOR.glob('*.py')) + sorted(ARQS.glob('*.py'))
    assert any(p.name == 'service.py' for p in paths)
    return paths


def test_no_module_of_the_conductor_holds_state():
    found = []
    for path in _conductor_and_arqs():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found.append(f'{path.relative_to(STEWARD).as_posix()}:{node.lineno} global {node.names}')
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                # Constants (UPPER_CASE) and the logger only.
                if isinstance(target, ast.Name) and target.id != 'LOG' and \
                        not target.id.isupper():
                    found.append(f'{path.relative_to(STEWARD).as_posix()}:{node.lineno} {target.id}')
    assert not found, found


def test_metrics_import_nothing_of_the_conductor():
    graph = import_graph()
    assert not {m for m in graph['steward.metrics'] if m.startswith('steward.conductor')}


def _built(path, names):
    """Where ``path`` calls one of ``names`` (``Name(...)``, ``module.Name(...)``)
    or its ``from_conf`` (``Name.from_conf(...)``): (line, name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == 'from_conf':
            func = func.value
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
        if name in names:
            found.append((node.lineno, name))
    return found


def _module_of(path):
    parts = list(path.relative_to(STEWARD.parent).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def _dotted(node):
    """``a.b.c`` of a Name/Attribute chain, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return '.'.join([node.id] + names[::-1])


def _built_by_module(source, module, wanted):
    """Where ``source`` (the text of ``module``) calls one of ``wanted`` (full
    dotted names, ``steward.metrics.Metrics``), whatever it is imported as:
    ``from steward import metrics as m; m.Metrics()``, ``from steward.metrics
    import Metrics as M; M()``, ``import steward.metrics; steward.metrics.Metrics()``,
    or ``Metrics()`` in steward/metrics.py itself: (line, full name)."""
    tree = ast.parse(source)
    aliases = astnames.import_aliases(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        if dotted is None:
            continue
        head, _, rest = dotted.partition('.')
        full = aliases.get(head, f'{module}.{head}') + (f'.{rest}' if rest else '')
        if full in wanted:
            found.append((node.lineno, full))
    return found


def test_only_the_composition_root_builds_the_metrics_and_the_policy_enforcer():
    found = []
    for path in sorted(STEWARD.rglob('*.py')):
        rel = path.relative_to(STEWARD).as_posix()
        if rel.startswith('cmd/'):
            continue
        found += [f'{rel}:{line} {name}(...)' for line, name in
                  _built_by_module(path.read_text(), _module_of(path), ROOT_ONLY_BY_MODULE)]
    assert not found, found


def test_the_metrics_and_policy_rule_sees_each_way_of_building():
    """The check above is not blind, and oslo.policy's Enforcer is not steward's."""
    source = (
        'from steward import metrics as steward_metrics\n'
        'from steward.api import policy as api_policy\n'
        'from steward.metrics import Metrics as M\n'
        'import steward.api.policy\n'
        'from oslo_policy import policy as oslo_policy\n'
        'a = steward_metrics.Metrics(database)\n'
        'b = api_policy.Enforcer()\n'
        'c = M()\n'
        'd = steward.api.policy.Enforcer(conf)\n'
        'e = oslo_policy.Enforcer(conf)\n'
        'def f():\n'
        '    from steward import metrics\n'
        '    return metrics.Metrics(None, multiprocess=True)\n')
    assert _built_by_module(source, 'steward.api.app', ROOT_ONLY_BY_MODULE) == [
        (6, 'steward.metrics.Metrics'), (7, 'steward.api.policy.Enforcer'),
        (8, 'steward.metrics.Metrics'), (9, 'steward.api.policy.Enforcer'),
        (13, 'steward.metrics.Metrics')]
    # Inside its own module, the class is called by its bare name.
    assert _built_by_module('x = Metrics()\n', 'steward.metrics', ROOT_ONLY_BY_MODULE) == [
        (1, 'steward.metrics.Metrics')]
    # The API as it was before create_app was handed both: caught.
    before = ('from steward.api import policy as api_policy\n'
              'def create_app(conductor_api, database, metrics=None, policy=None):\n'
              '    if metrics is None:\n'
              '        from steward import metrics as steward_metrics\n'
              '        metrics = steward_metrics.Metrics(database)\n'
              '    return policy if policy is not None else api_policy.Enforcer()\n')
    assert [line for line, _ in _built_by_module(before, 'steward.api.app',
                                                 ROOT_ONLY_BY_MODULE)] == [5, 6]


def test_only_the_composition_root_builds_the_database_transport_placement_and_deps():
    found = []
    for path in sorted(STEWARD.rglob('*.py')):
        rel = path.relative_to(STEWARD).as_posix()
        if rel.startswith('cmd/') or rel in OTHER_ROOTS:
            continue
        found += [f'{rel}:{line} {name}(...)' for line, name in _built(path, ROOT_ONLY)]
    assert not found, found


def test_no_module_of_the_conductor_builds_what_it_is_handed():
    found = []
    for path in _conductor_and_arqs():
        found += [f'{path.relative_to(STEWARD).as_posix()}:{line} {name}(...)'
                  for line, name in _built(path, HANDED_TO_THE_CONDUCTOR)]
    assert not found, found


def test_the_rule_sees_each_way_of_building(tmp_path):
    """The check above is not blind: each spelling it must catch, caught."""
    source = tmp_path / 'wiring_probe.py'
    source.write_text('a = Database()\nb = rpc.Transport(x)\n'
                      'c = client.PlacementClient.from_conf(conf)\n'
                      'd = deps.Deps(database=None)\ne = PlacementClient.other()\n')
    assert sorted(_built(source, ROOT_ONLY)) == [(1, 'Database'), (2, 'Transport'),
                                                 (3, 'PlacementClient'), (4, 'Deps')]


class _Client:
    def __init__(self, reads):
        self.stats = {'reads': reads, 'writes': 0, 'errors': 0}


def _deps(placement_client, metrics_=None, agent_api=None):
    return conductor_deps.Deps(database=None, metrics=metrics_ or metrics.Metrics(),
                               placement_client=placement_client, nova=object(),
                               notifier=object(), agent_api=agent_api or object())


def _family(provider=None):
    return {m.name: m for m in metrics.PlacementCollector(provider).collect()}


def test_a_missing_dependency_is_a_type_error_not_a_client_of_its_own():
    with pytest.raises(TypeError):
        ConductorManager()
    fields = {f.name for f in dataclasses.fields(conductor_deps.Deps)}
    assert fields == {'database', 'metrics', 'placement_client', 'nova', 'notifier',
                      'agent_api'}
    for left_out in fields:
        with pytest.raises(TypeError):
            conductor_deps.Deps(**{f: None for f in fields - {left_out}})


def test_a_conductor_uses_the_deps_it_is_given():
    given = _deps(_Client(1))
    conductor = ConductorManager(given)
    assert conductor.deps is given
    assert (conductor.database, conductor.metrics, conductor.placement, conductor.notifier,
            conductor.agent_api) == (given.database, given.metrics, given.placement_client,
                                     given.notifier, given.agent_api)
    assert conductor.reporter.placement_sync.placement is given.placement_client
    assert conductor.periodic.deps is given
    assert given.placement() is given.placement_client
    from steward.common import exception
    with pytest.raises(exception.ServiceUnavailable):
        _deps(None).placement()


def test_each_conductor_reports_its_own_placement_and_the_last_started_one_reports():
    shared = metrics.Metrics()
    first = ConductorManager(_deps(_Client(1), shared))
    second = ConductorManager(_deps(None, shared))
    got = _family(first.placement_stats)['steward_placement_requests']
    assert {s.labels['kind']: s.value for s in got.samples} == {'read': 1, 'write': 0}
    # A conductor without Placement reports no family.
    assert _family(second.placement_stats) == {}
    # Both report to the Metrics the composition root gave them; the last
    # conductor registered is the one reported.
    assert first.metrics is second.metrics is shared
    shared.register_placement_stats(first.placement_stats)
    assert shared.placement.registered() == first.placement_stats
    shared.register_placement_stats(second.placement_stats)
    assert shared.placement.registered() == second.placement_stats
    shared.unregister_placement_stats(second.placement_stats)
    assert shared.placement.registered() == first.placement_stats
    shared.unregister_placement_stats(first.placement_stats)
    assert shared.placement.registered() is None

"""No cycle between steward's packages, and the layers the tree keeps.

The module graph is tests/unit/structure/test_import_cycles.py's (every import ``ast`` finds,
lazy ones included), collapsed to packages: ``steward.<first component>``, so a
top-level module (steward/process.py, steward/metrics.py, ...) is a package of its
own. Modules can be acyclic while their packages are not (a -> b.x, b.x -> a.y):
such a pair of packages can be neither understood nor moved apart."""
import ast
import pathlib

import steward
from tests.unit.structure.test_import_cycles import find_cycles
from tests.unit.structure.test_import_cycles import import_graph

# package: (the packages it may import, why). Nothing of steward's but these (and
# itself); the rest of the tree may import them freely.
ONLY = {
    'steward.conf': (set(), 'options only: every service reads them, so they import '
                            'none of them'),
    'steward.common': ({'steward.conf'}, 'the shared vocabulary (states, exceptions, '
                                         'context, RPC) under every service'),
    'steward.osc': (set(), "the OpenStackClient plugin runs on a client's machine, "
                           'apart from the services'),
}
# package: (the packages it must not import, why).
NEVER = {
    'steward.db': ({'steward.api', 'steward.arqs', 'steward.conductor', 'steward.agent',
                    'steward.compute', 'steward.placement', 'steward.drivers',
                    'steward.cmd', 'steward.cyborg_import'},
                   'the database layer serves the services; they hand it what it '
                   'needs'),
    'steward.drivers': ({'steward.api', 'steward.arqs', 'steward.conductor',
                         'steward.agent', 'steward.compute', 'steward.placement',
                         'steward.db', 'steward.cmd'},
                        'a driver runs in the agent and reports objects; the agent '
                        'hands them on'),
    'steward.api': ({'steward.agent', 'steward.arqs', 'steward.conductor',
                     'steward.drivers', 'steward.privsep', 'steward.cmd'},
                    'the API changes ARQs and devices only through the ArqAPI and '
                    'the ConductorAPI it is handed (the composition root chooses '
                    'them)'),
    # The ARQ operations moved out of the conductor (issue 54): they run in the
    # API processes and in the conductors, so they import neither; what only a
    # conductor does (a released device's cleanup) is handed to them.
    'steward.arqs': ({'steward.api', 'steward.conductor', 'steward.agent',
                      'steward.compute', 'steward.drivers', 'steward.privsep',
                      'steward.placement', 'steward.cmd', 'steward.cyborg_import'},
                     'the ARQ operations run in API processes and conductors alike, '
                     'on the database layer and the clients they are handed; a '
                     'conductor imports them, never the other way'),
    'steward.privsep': ({'steward.drivers', 'steward.agent'},
                        'the privileged entry points: drivers call them, never the '
                        'other way'),
    'steward.cyborg_import': ({'steward.api', 'steward.arqs', 'steward.conductor',
                               'steward.agent', 'steward.compute', 'steward.placement',
                               'steward.drivers', 'steward.cmd'},
                              'a one-off migration that uses the database layer and the '
                              'Placement client it is handed, like any other caller'),
}
# package: (the libraries it must not import, why).
NEVER_LIBRARIES = {
    'steward.common': ({'sqlalchemy', 'oslo_db', 'alembic'},
                       'the vocabulary names states; persisting them is the database '
                       "layer's (steward/db/transitions.py)"),
}


def package_of(module):
    return '.'.join(module.split('.')[:2])


def package_graph(graph):
    """The module graph collapsed to packages: {package: {package it imports}}."""
    packages = {}
    for module, targets in graph.items():
        mine = package_of(module)
        packages.setdefault(mine, set()).update(
            package_of(t) for t in targets if package_of(t) != mine)
    return packages


def _edges(graph, source, target):
    """The module imports that make package ``source`` import package ``target``."""
    return [f'{m} -> {t}' for m in sorted(graph) if package_of(m) == source
            for t in sorted(graph[m]) if package_of(t) == target]


def package_cycles(graph):
    """Each package cycle, with the module imports behind each of its steps."""
    found = []
    for cycle in find_cycles(package_graph(graph)):
        steps = [f'  {a} -> {b}: ' + ', '.join(_edges(graph, a, b))
                 for a, b in zip(cycle, cycle[1:])]
        found.append(' -> '.join(cycle) + '\n' + '\n'.join(steps))
    return found


def layer_violations(graph):
    packages = package_graph(graph)
    found = []
    for package, (allowed, why) in ONLY.items():
        for target in sorted(packages.get(package, set()) - allowed):
            found.append(f'{package} imports {target} ({why}): '
                         + ', '.join(_edges(graph, package, target)))
    for package, (forbidden, why) in NEVER.items():
        for target in sorted(packages.get(package, set()) & forbidden):
            found.append(f'{package} imports {target} ({why}): '
                         + ', '.join(_edges(graph, package, target)))
    return found


def test_a_package_cycle_of_acyclic_modules_is_found():
    graph = {'steward.a.x': {'steward.b.y'}, 'steward.b.y': {'steward.a.z'},
             'steward.a.z': set(), 'steward.c': {'steward.a.x'}}
    assert find_cycles(graph) == []
    assert package_graph(graph) == {'steward.a': {'steward.b'},
                                    'steward.b': {'steward.a'},
                                    'steward.c': {'steward.a'}}
    assert package_cycles(graph) == [
        'steward.a -> steward.b -> steward.a\n'
        '  steward.a -> steward.b: steward.a.x -> steward.b.y\n'
        '  steward.b -> steward.a: steward.b.y -> steward.a.z']


def test_a_layer_violation_is_found():
    graph = {'steward.conf.checks': {'steward.agent.rpcapi', 'steward.conf'},
             'steward.conf': set(), 'steward.agent.rpcapi': {'steward.conf'},
             'steward.common.exception': {'steward.conf'},
             'steward.db.cyborg_import': {'steward.drivers.fake',
                                          'steward.common.exception'},
             'steward.drivers.fake': set(),
             'steward.privsep.blockdev': {'steward.drivers.blockio'},
             'steward.drivers.blockio': set()}
    found = layer_violations(graph)
    assert len(found) == 3
    assert found[0].startswith('steward.conf imports steward.agent (options only')
    assert found[0].endswith(': steward.conf.checks -> steward.agent.rpcapi')
    assert found[1].startswith('steward.db imports steward.drivers (')
    assert found[2].startswith('steward.privsep imports steward.drivers (')
    del graph['steward.conf.checks']
    del graph['steward.db.cyborg_import']
    del graph['steward.privsep.blockdev']
    assert layer_violations(graph) == []


def test_steward_has_no_package_cycles():
    cycles = package_cycles(import_graph())
    assert not cycles, 'package cycles in steward/:\n' + '\n'.join(cycles)


def test_steward_keeps_its_layers():
    found = layer_violations(import_graph())
    assert not found, 'layers crossed in steward/:\n' + '\n'.join(found)


def test_every_layer_rule_names_a_package_that_exists():
    packages = package_graph(import_graph())
    for package, (targets, _why) in {**ONLY, **NEVER}.items():
        assert package in packages, package
        assert targets <= set(packages), targets - set(packages)


def library_imports(source):
    """The top-level names of every library ``source`` imports (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split('.')[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split('.')[0])
    return found


def library_violations(sources):
    """``sources``: {module: its text}. Each import of a library a package must not
    import (NEVER_LIBRARIES)."""
    found = []
    for module, text in sorted(sources.items()):
        for package, (forbidden, why) in NEVER_LIBRARIES.items():
            if package_of(module) == package:
                found += [f'{module} imports {lib} ({why})'
                          for lib in sorted(library_imports(text) & forbidden)]
    return found


def steward_sources():
    root = pathlib.Path(steward.__file__).parent
    return {'.'.join(('steward',) + p.relative_to(root).with_suffix('').parts)
            .removesuffix('.__init__'): p.read_text() for p in root.rglob('*.py')}


def test_a_library_import_is_found():
    found = library_violations({
        'steward.common.states': 'def f():\n    from sqlalchemy import orm\n',
        'steward.common.context': 'import oslo_context\n',
        'steward.db.models': 'import sqlalchemy as sa\n'})
    assert len(found) == 1
    assert found[0].startswith('steward.common.states imports sqlalchemy (')


def test_steward_keeps_libraries_in_their_layers():
    sources = steward_sources()
    assert 'steward.common.states' in sources and 'steward.db.transitions' in sources
    found = library_violations(sources)
    assert not found, 'libraries imported outside their layer:\n' + '\n'.join(found)

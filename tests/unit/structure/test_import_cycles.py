"""No import cycles in steward/: every ``import`` and ``from ... import`` that
``ast`` finds in a module counts, including those inside functions (a lazy import
hides a cycle from the interpreter, not from the design)."""
import ast
import pathlib

import steward

ROOT = pathlib.Path(steward.__file__).parent


def _module_name(path):
    rel = path.relative_to(ROOT.parent).with_suffix('')
    parts = list(rel.parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def _modules():
    return {_module_name(p): p for p in ROOT.rglob('*.py')}


def _resolve(name, modules):
    """The steward module ``name`` stands for (a package's __init__ included), or
    None for anything outside steward."""
    while name and name not in modules:
        name = name.rpartition('.')[0]
    return name or None


def _imports(module, path, modules):
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == '__init__.py' else module.rpartition('.')[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')
                anchor = anchor[:len(anchor) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports pkg.mod when it is a module.
            names = [f'{base}.{a.name}' if f'{base}.{a.name}' in modules else base
                     for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycles(graph):
    """Every strongly connected component of more than one module (Tarjan), each
    with one cycle through it spelled out."""
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, scc) for scc in sccs]


def _one_cycle(graph, scc):
    members, start = set(scc), scc[0]
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return scc


def test_the_scanner_sees_lazy_imports():
    graph = {'a': {'b'}, 'b': {'a'}}
    assert find_cycles(graph) == [['a', 'b', 'a']]
    source = 'def f():\n    from steward.arqs import device_ops\n'
    tree = ast.parse(source)
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))


def test_steward_has_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, 'import cycles in steward/:\n' + '\n'.join(
        ' -> '.join(c) for c in cycles)

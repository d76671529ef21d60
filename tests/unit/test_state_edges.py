"""Every declared edge is used and every state can be reached: the transition
table says what the code does, nothing more. The callers are found by reading
steward/ with ``ast``: each ``transitions.advance(session, <model>, row, <target>,
event=<event>)`` (and ``transitions.remove``, the same edge then the row's
removal) names its model, target and event literally, and the state it passes
through as ``via=(<state>, <event>)`` (the code is kept that way so this test can
see them)."""
import ast
import pathlib

import steward
from steward.common import states
from steward.db import models

ROOT = pathlib.Path(steward.__file__).parent


def _is_advance(node):
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr in ('advance', 'remove')
            and isinstance(func.value, ast.Name) and func.value.id == 'transitions') or \
        (isinstance(func, ast.Name) and func.id == 'advance')


def _literal(node, where, what):
    """The value ``node`` names: ``states.X`` / ``m.X`` attributes and strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = {'states': states, 'm': models, 'models': models}.get(node.value.id)
        if owner is not None and hasattr(owner, node.attr):
            return getattr(owner, node.attr)
    raise AssertionError(f'{where}: the {what} of advance() is not a literal '
                         f'({ast.unparse(node)}); pass it literally')


def advance_calls():
    """[(kind, event, target, 'file:line')] of every advance() call in steward/."""
    found = []
    for path in sorted(ROOT.rglob('*.py')):
        if path.name == 'transitions.py' and path.parent.name == 'db':
            continue        # the definition, not a caller
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _is_advance(node)):
                continue
            where = f'{path.relative_to(ROOT.parent)}:{node.lineno}'
            assert len(node.args) >= 4, f'{where}: advance(session, model, row, target)'
            model = _literal(node.args[1], where, 'model')
            target = _literal(node.args[3], where, 'target')
            event = next((k.value for k in node.keywords if k.arg == 'event'), None)
            assert event is not None, f'{where}: advance() without event='
            found.append((model.__state_kind__, _literal(event, where, 'event'),
                          target, where))
            via = next((k.value for k in node.keywords if k.arg == 'via'), None)
            if via is not None:
                assert isinstance(via, ast.Tuple) and len(via.elts) == 2, \
                    f'{where}: via=(state, event), literally'
                found.append((model.__state_kind__, _literal(via.elts[1], where, 'event'),
                              _literal(via.elts[0], where, 'target'), where))
    return found


def test_the_scan_finds_the_callers():
    calls = advance_calls()
    # One caller of each kind that must be there, so a broken scan fails loudly.
    assert any(c[:3] == ('arq', 'bind_done', states.ARQ_BOUND) for c in calls)
    assert any(c[:3] == ('arq', 'bind', states.ARQ_BIND_STARTED) for c in calls)  # via
    assert any(c[:3] == ('arq', 'delete', states.ARQ_DELETING) for c in calls)
    assert any(c[:3] == ('device', 'cleaned', states.DEV_AVAILABLE) for c in calls)
    assert any(c[:3] == ('erase', 'succeed', states.ERASE_SUCCEEDED) for c in calls)


def test_every_declared_edge_has_a_caller():
    used = {c[:3] for c in advance_calls()}
    unused = [(kind, t) for kind, table in states._TABLES.items() for t in table
              if (kind, t.event, t.target) not in used]
    assert not unused, 'declared edges no code takes: ' + ', '.join(
        f'{kind} {t.source} --{t.event}--> {t.target}' for kind, t in unused)


def test_every_caller_takes_a_declared_edge():
    declared = {(kind, t.event, t.target) for kind, table in states._TABLES.items()
                for t in table}
    undeclared = [c for c in advance_calls() if c[:3] not in declared]
    assert not undeclared, f'advance() calls on no declared edge: {undeclared}'


def test_every_state_is_reachable_from_an_initial_state():
    for kind, table in states._TABLES.items():
        every = states.STATES[kind]
        seen = set(states.INITIAL_STATES[kind])
        todo = list(seen)
        while todo:
            here = todo.pop()
            for t in table:
                if t.source == here and t.target not in seen:
                    seen.add(t.target)
                    todo.append(t.target)
        assert set(every) <= seen, (kind, sorted(set(every) - seen))
        # No edge leaves a state nothing can be in.
        assert {t.source for t in table} <= seen, kind


def test_retired_states_are_stored_but_never_entered():
    for t in states.ARQ_TRANSITIONS:
        assert t.source not in states.ARQ_RETIRED_STATES
        assert t.target not in states.ARQ_RETIRED_STATES
    column = models.ExtARQ.__table__.c.state.type
    assert set(column.enums) == set(states.ARQ_STORED_STATES)


def test_every_kind_has_a_table_and_a_stored_column():
    assert set(states._TABLES) == set(states.STATES) == set(states.INITIAL_STATES) == \
        {'arq', 'device', 'erase'}
    kinds = {getattr(model, '__state_kind__', None): model
             for model in vars(models).values() if isinstance(model, type)}
    for kind in states._TABLES:
        model = kinds[kind]
        column = model.__table__.c[model.__state_column__]
        if kind == 'erase':
            assert set(column.type.enums) == set(states.ERASE_STATES)


def test_erase_status_is_written_only_by_advance():
    """No code outside db/erase_records.py's create (an initial state, checked) names an
    erase record's status as a value to write."""
    for path in sorted(ROOT.rglob('*.py')):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == 'erase_record_update':
                names = {k.arg for k in node.keywords}
                assert 'status' not in names, f'{path}:{node.lineno}'

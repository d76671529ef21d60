"""Every query of the services lives in steward/db.

The API and the conductor share one data layer (steward/db, a module per
resource): the ARQ operations (steward/arqs) run in either process, and a
statement written in one of them would be a second copy of the data layer. A module of the packages
below that builds a SQL statement (``sa.select``, ``insert``, ``update``,
``delete``, ``text``...) or runs one (``.execute``, ``.query``, a session's
``.get``) is found here, by ``ast``."""
import ast

from tests.unit.structure.test_import_cycles import _modules

# The packages (or modules) that run the services' work on the database.
SERVICES = ('steward.api', 'steward.arqs', 'steward.conductor', 'steward.agent',
            'steward.metrics')
BUILDERS = frozenset({'select', 'insert', 'update', 'delete', 'text', 'union',
                      'exists', 'bindparam'})
RUNNERS = frozenset({'execute', 'exec_driver_sql', 'query', 'scalars', 'scalar'})
SESSION_NAMES = frozenset({'s', 'session', 'conn', 'connection'})


def statements(source):
    """(line, text) of each statement built or run in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        base = func.value.id if isinstance(func.value, ast.Name) else None
        if (base in ('sa', 'sqlalchemy') and func.attr in BUILDERS) or \
                func.attr in RUNNERS or \
                (base in SESSION_NAMES and func.attr == 'get'):
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def _in_services(module):
    return any(module == p or module.startswith(p + '.') for p in SERVICES)


def test_a_statement_is_found():
    source = ('import sqlalchemy as sa\n'
              'def f(s, m):\n'
              '    s.execute(sa.select(m.Device))\n'
              '    s.get(m.Device, 1)\n'
              '    conf.get("x")\n'
              '    device_db.device_get(s, "u")\n')
    assert sorted(line for line, _ in statements(source)) == [3, 3, 4]


def test_the_services_write_no_statement_of_their_own():
    modules = {name: path for name, path in _modules().items() if _in_services(name)}
    assert {'steward.arqs.ops', 'steward.arqs.device_ops', 'steward.conductor.cleanup_ops',
            'steward.api.healthcheck'} <= set(modules)
    found = [f'{name}:{line}: {text}' for name, path in sorted(modules.items())
             for line, text in statements(path.read_text())]
    assert not found, ('statements outside steward/db (move them into its module of '
                       'the resource):\n' + '\n'.join(found))

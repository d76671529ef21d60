"""No module-level wiring in steward/: no ``global`` statement, and no module-level
instance of an engine, a transport, a policy enforcer, a metrics registry or
family, or a client. Each command's composition root (steward/cmd/root.py) builds
those and hands them down. The scan is ``ast`` over every module (the modules of
tests/unit/structure/test_import_cycles.py); what is kept on purpose is listed in ALLOWED,
each entry with its reason."""
import ast
import re

from tests.unit.structure.test_import_cycles import _modules

# Calls that build wiring: SQLAlchemy engines and session factories, oslo.messaging
# transports, servers and clients, oslo.policy enforcers, prometheus registries and
# families, HTTP/keystoneauth sessions and service clients, and Steward's own
# Database, Metrics and composition root.
WIRING = re.compile(
    r'^(create_engine|sessionmaker|scoped_session|get_(rpc_|notification_)?transport|'
    r'get_rpc_client|get_rpc_server|get_client|get_server|Notifier|Enforcer|'
    r'CollectorRegistry|Histogram|Counter|Gauge|Summary|\w+Collector|'
    r'Session|Adapter|\w*Client|\w+API|Database|Metrics|Root)$')

# Module-level state that is not wiring, kept on purpose (not flagged by the scan):
# - oslo.config's CONF (steward/conf): the one project-wide configuration object, as in
#   every OpenStack service.
# - caches that are pure functions of immutable inputs: steward/db/perf.py _ROW_TYPES
#   (row namedtuples per table), steward/db/transitions.py _STATEMENTS (compiled CAS
#   statements per shape), steward/api/views.py _ENCODED (a row's JSON keyed by all it
#   is made of).
# - process-wide by nature: steward/db/perf.py's gc pause count (gc.disable() switches
#   the whole process), steward/common/memory_transport.py's broker queues and wake-up
#   condition (every transport of the process must meet there, as kombu's memory
#   transport keeps its queues on the class), steward/placement/app.py _built
#   (Placement's own database layer is configured once per process, @run_once),
#   steward/privsep contexts (oslo.privsep's entrypoint decorators need them at import),
#   prometheus_client.disable_created_metrics() in steward/metrics.py (a switch of the
#   library for the process, set once at import).
# (module, what) -> why it stays. ``what`` is ``global NAME`` or the name a
# module-level instance is bound to (``<expr>`` for an unbound call).
ALLOWED = {
    ('steward.db.perf', 'global _gc_pausers'):
        "gc.disable() switches the whole process: overlapping bulk reads of every "
        "Database in it must share one count of who paused the collector",
    ('steward.common.memory_transport', 'global _puts'):
        "the in-memory broker is process-wide by nature: oslo.messaging finds the "
        "driver by URL, and every transport of the process must meet on its queues",
}


def _call_name(call):
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _top_level(body):
    """The statements run at import: the module's, and those of its module-level
    if/try/with/for blocks (not functions, not classes' methods)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for field in ('body', 'orelse', 'finalbody'):
            yield from _top_level(getattr(node, field, None) or [])
        for handler in getattr(node, 'handlers', None) or []:
            yield from _top_level(handler.body)


def offences(source, module='<test>'):
    """``(module, what)`` of every global statement and module-level wiring
    instance in ``source``."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [(module, f'global {name}') for name in node.names]
    for node in _top_level(tree.body):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = ','.join(ast.unparse(t) for t in targets)
            value = node.value
        elif isinstance(node, ast.Expr):
            bound, value = '<expr>', node.value
        else:
            continue
        if value is None:
            continue
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call) and WIRING.match(_call_name(sub) or ''):
                found.append((module, bound))
                break
    return found


def scan():
    found = []
    for module, path in sorted(_modules().items()):
        found += offences(path.read_text(), module)
    return found


def test_no_module_level_wiring_in_steward():
    found = [f for f in scan() if f not in ALLOWED]
    assert not found, ('module-level wiring (build it in the composition root, '
                       f'steward/cmd/root.py, and hand it down): {found}')


def test_every_allowed_entry_is_still_needed_and_says_why():
    found = set(scan())
    for entry, reason in ALLOWED.items():
        assert entry in found, f'{entry} is allowed but no longer there: drop it'
        assert reason.strip(), entry


# The scan can fail: each of these is what it must find.
def test_a_global_statement_is_found():
    source = 'x = None\n\ndef set_x(v):\n    global x\n    x = v\n'
    assert offences(source) == [('<test>', 'global x')]


def test_module_level_instances_are_found():
    source = '\n'.join([
        'import sqlalchemy as sa',
        'import prometheus_client',
        'from oslo_policy import policy',
        'import oslo_messaging as messaging',
        'ENGINE = sa.create_engine("sqlite://")',
        'REGISTRY = prometheus_client.CollectorRegistry()',
        'BINDS = prometheus_client.Histogram("b", "b", registry=REGISTRY)',
        '_enforcer = policy.Enforcer(None)',
        'try:',
        '    TRANSPORT = messaging.get_rpc_transport(None)',
        'except ImportError:',
        '    TRANSPORT = None',
        'prometheus_client.ProcessCollector(registry=REGISTRY)',
        'PLACEMENT = make(PlacementClient(endpoint="x"))',
    ])
    assert [what for _, what in offences(source)] == [
        'ENGINE', 'REGISTRY', 'BINDS', '_enforcer', 'TRANSPORT', '<expr>', 'PLACEMENT']


def test_what_is_not_wiring_is_not_found():
    source = '\n'.join([
        'import collections, re, threading',
        'LOG = logging.getLogger(__name__)',
        'PATTERN = re.compile("x")',
        'Row = collections.namedtuple("Row", "a b")',
        'def build():',
        '    engine = create_engine("sqlite://")',
        '    return engine',
        'class Service:',
        '    def __init__(self):',
        '        self.client = PlacementClient()',
    ])
    assert offences(source) == []

"""One supervisor kind in the tree: gunicorn, in steward/supervisor.py.

Nothing else in steward/ manages worker processes: no fork, spawn or reaping of
children, no multiprocessing, no ``preexec_fn`` (a fork hook in a parent that may
already run threads), no socketpair between processes, no flock/lockf on a shared
lock file, no handler for SIGCHLD, no loop that starts processes again and again,
no second supervisor (gunicorn or uvicorn's own) imported or asked for elsewhere.
What starts a child legitimately, and is no supervision, is allow-listed below with
its reason; an allow-list entry nothing needs any more fails too."""
import ast
import pathlib

import steward
from tests.unit.structure import astnames

ROOT = pathlib.Path(steward.__file__).parent
SUPERVISOR = 'steward/supervisor.py'

# (file, rule): why it is a child process and not supervision.
ALLOWED = {
    ('steward/privsep/__init__.py', 'fork'):
        "oslo.privsep's fork channel: each privsep daemon is forked once, at start, "
        'before any thread, and lives as long as the agent',
    ('steward/privsep/__init__.py', 'socketpair'):
        "oslo.privsep's channel between the agent and the daemon it forked",
    ('steward/privsep/__init__.py', 'wait'):
        'reaps that privsep daemon once its channel closes (no restart)',
    ('steward/privsep/helper.py', 'fork'):
        "steward-privsep-helper (the sudo path) forks the daemon and exits, as "
        "oslo.privsep's own privsep-helper does",
    ('steward/placement/handle.py', 'preexec_fn'):
        'the embedded Placement child, started once by its handle, dies with its '
        'parent (PR_SET_PDEATHSIG set in the child before exec)',
}

# Process creation: what a restart loop would repeat.
_STARTS = ('subprocess.Popen', 'subprocess.run', 'subprocess.call',
           'subprocess.check_call', 'subprocess.check_output', 'os.fork', 'os.forkpty',
           'pty.fork', 'os.spawn*', 'os.posix_spawn*', 'os.exec*')
_CALLS = {
    'fork': ('os.fork', 'os.forkpty', 'pty.fork'),
    'spawn': ('os.spawn*', 'os.posix_spawn*'),
    'wait': ('os.wait', 'os.waitpid', 'os.wait3', 'os.wait4', 'os.waitid'),
    'socketpair': ('socket.socketpair',),
    'file lock': ('fcntl.flock', 'fcntl.lockf'),
}
_IMPORTS = {
    'multiprocessing': ('multiprocessing', 'concurrent.futures.process',
                        'concurrent.futures.ProcessPoolExecutor'),
    'supervisor': ('gunicorn', 'uvicorn_worker', 'uvicorn.supervisors'),
}


def _dotted(node, names):
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return f'{base}.{node.attr}' if base else None
    return None


def _is(name, patterns):
    """``name`` is one of ``patterns``, inside one (a submodule, an attribute), or
    starts like one ending in ``*``."""
    return name is not None and any(
        name.startswith(p[:-1]) if p.endswith('*') else
        name == p or name.startswith(p + '.') for p in patterns)


def _imported(node):
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level:
        return [node.module] + [f'{node.module}.{a.name}' for a in node.names]
    return []


def scan(source, path):
    """[(line, rule, what)] of everything in ``source`` (the file ``path``, relative
    to the repository) that manages processes."""
    tree = ast.parse(source, path)
    names = astnames.import_aliases(tree)
    starters = _starters(tree, names)
    found = []
    for node in ast.walk(tree):
        for module in _imported(node):
            for rule, prefixes in _IMPORTS.items():
                if _is(module, prefixes) and not (rule == 'supervisor' and
                                                  path == SUPERVISOR):
                    found.append((node.lineno, rule, f'import {module}'))
        if isinstance(node, ast.Attribute) and _dotted(node, names) == 'signal.SIGCHLD':
            found.append((node.lineno, 'SIGCHLD', 'signal.SIGCHLD'))
        if isinstance(node, ast.Attribute) and \
                _is(_dotted(node, names), _IMPORTS['multiprocessing']):
            found.append((node.lineno, 'multiprocessing', _dotted(node, names)))
        if isinstance(node, ast.Call):
            func = _dotted(node.func, names)
            for rule, prefixes in _CALLS.items():
                if _is(func, prefixes):
                    found.append((node.lineno, rule, f'{func}()'))
            keywords = {k.arg for k in node.keywords}
            if 'preexec_fn' in keywords:
                found.append((node.lineno, 'preexec_fn', f'{func}(preexec_fn=...)'))
            if func in ('uvicorn.run', 'uvicorn.Config') and 'workers' in keywords:
                found.append((node.lineno, 'supervisor', f'{func}(workers=...)'))
        if isinstance(node, ast.While):
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Call):
                    continue
                func = _dotted(inner.func, names)
                callee = inner.func.attr if isinstance(inner.func, ast.Attribute) \
                    else getattr(inner.func, 'id', None)
                if _is(func, _STARTS) or callee in starters:
                    found.append((node.lineno, 'restart loop',
                                  f'{func}() in a while loop (line {inner.lineno})'))
    return sorted(set(found))


def _starters(tree, names):
    """Functions of the module that start a process themselves: a while loop
    calling one (``self._spawn(slot)``) restarts processes as surely as one that
    calls Popen."""
    return {fn.name for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(isinstance(c, ast.Call) and _is(_dotted(c.func, names), _STARTS)
                    for c in ast.walk(fn))}


def tree_findings():
    found = []
    for path in sorted(ROOT.rglob('*.py')):
        rel = str(path.relative_to(ROOT.parent))
        found += [(rel, *f) for f in scan(path.read_text(), rel)]
    return found


OFFENDERS = [
    ('fork', 'import os\npid = os.fork()\n'),
    ('spawn', 'from os import posix_spawnp\nposix_spawnp("x", ["x"], {})\n'),
    ('wait', 'import os as o\no.waitpid(-1, 0)\n'),
    ('socketpair', 'import socket\na, b = socket.socketpair()\n'),
    ('file lock', 'import fcntl\nfcntl.flock(fd, fcntl.LOCK_EX)\n'),
    ('multiprocessing', 'from multiprocessing import Process\nProcess(target=f).start()\n'),
    ('multiprocessing', 'from concurrent import futures\nfutures.ProcessPoolExecutor(2)\n'),
    ('preexec_fn', 'import subprocess\nsubprocess.Popen(["x"], preexec_fn=os.setsid)\n'),
    ('SIGCHLD', 'import signal\nsignal.signal(signal.SIGCHLD, reap)\n'),
    ('restart loop', ('import subprocess\n'
                      'def keep(argv):\n'
                      '    while True:\n'
                      '        subprocess.run(argv)\n')),
    # One call away: the loop restarts through a method that starts the process.
    ('restart loop', ('import subprocess\n'
                      'class Pool:\n'
                      '    def _spawn(self, slot):\n'
                      '        self.procs[slot] = subprocess.Popen(["worker"])\n'
                      '    def watch(self):\n'
                      '        while not self.stopping.wait(0.5):\n'
                      '            for slot in self.dead():\n'
                      '                self._spawn(slot)\n')),
    ('supervisor', 'import uvicorn\nuvicorn.run(app, workers=4)\n'),
    ('supervisor', 'from gunicorn.app.base import BaseApplication\n'),
]


def test_each_rule_finds_its_offender():
    for rule, source in OFFENDERS:
        rules = {f[1] for f in scan(source, 'steward/worker_pool.py')}
        assert rule in rules, (rule, scan(source, 'steward/worker_pool.py'))
    assert scan('import os\nos.getpid()\nimport subprocess\n'
                'for ns in (1, 2):\n    subprocess.run(["nvme", "list"])\n',
                'steward/x.py') == []


def test_gunicorn_belongs_to_the_supervisor_alone():
    source = 'from gunicorn.app import base\nfrom uvicorn_worker import UvicornWorker\n'
    assert {f[1] for f in scan(source, 'steward/placement/embedded.py')} == {'supervisor'}
    assert scan(source, SUPERVISOR) == []
    # The supervisor module is scanned like any other for the rest.
    assert {f[1] for f in scan(OFFENDERS[0][1], SUPERVISOR)} == {'fork'}


def test_nothing_but_gunicorn_supervises_processes():
    found = tree_findings()
    unexplained = [f for f in found if f[:3:2] not in ALLOWED]
    assert not unexplained, 'process management outside steward/supervisor.py:\n' + \
        '\n'.join(f'{path}:{line}: {rule}: {what}' for path, line, rule, what in unexplained)
    stale = set(ALLOWED) - {f[:3:2] for f in found}
    assert not stale, f'allow-list entries nothing needs any more: {sorted(stale)}'


def test_the_supervisor_is_gunicorn():
    source = (ROOT / 'supervisor.py').read_text()
    assert 'from gunicorn.app import base' in source

"""Every package Steward's code imports is declared in pyproject.toml, and every
declared package is used: the runtime code's imports against
``[project] dependencies``, the tests', benchmarks' and development tools' (tools/)
against those plus the ``test`` extra. A dependency that only a test uses (a test
client) belongs in the extra; one that nothing imports any more is dropped, not
carried."""
import ast
import functools
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[3]

# Declared but never imported by name, each for a reason.
USED_WITHOUT_IMPORT = {
    # uvicorn[standard]'s extras (uvloop, httptools) are what it serves with.
    # Database drivers SQLAlchemy loads from a URL's dialect.
    'psycopg2-binary', 'psycopg', 'pymysql',
    # Console programs the tests run (`openstack ...`).
    'python-openstackclient', 'osc-placement', 'python-cyborgclient',
    # pytest plugins, loaded by pytest itself.
    'pytest-xdist',
    # Imported through tests/fixtures/requirements.need_import('libvirt', ...).
    'libvirt-python',
    # Programs run by tools/lint.sh and tests/unit/test_lint.py (ruff), and
    # tests/unit/test_releasenotes.py and `tox -e releasenotes` (reno), and by
    # .ci/run and tests/unit/test_bindep.py (bindep).
    'ruff', 'reno', 'bindep',
}
# Imported by code that runs in another interpreter: tests/fixtures/side_venv.py's
# virtualenvs (Nova, an upstream Cyborg), not this one.
SIDE_VENV_IMPORTS = {'nova', 'cyborg'}


def _normalise(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def _declared():
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']
    name = re.compile(r'^\s*([A-Za-z0-9][A-Za-z0-9._-]*)')

    def names(reqs):
        return {_normalise(name.match(r).group(1)) for r in reqs}
    return names(project['dependencies']), names(project['optional-dependencies']['test'])


def _imports(*dirs):
    found = {}
    for d in dirs:
        for path in sorted((ROOT / d).rglob('*.py')):
            tree = ast.parse(path.read_text(), str(path))
            if _runs_elsewhere(tree):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    top = mod.split('.')[0]
                    if top not in sys.stdlib_module_names and \
                            top not in ('steward', 'tests', 'bench', 'tools', '__future__'):
                        found.setdefault(top, f'{path.relative_to(ROOT)}:{node.lineno}')
    return found


def _runs_elsewhere(tree):
    """A module importing Nova or Cyborg runs in their virtualenv, not this one."""
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        if any(n.split('.')[0] in SIDE_VENV_IMPORTS for n in names):
            return True
    return False


@functools.cache
def _packages():
    return importlib.metadata.packages_distributions()


def _distributions(top, where):
    dists = _packages().get(top)
    assert dists, f'{where}: imports {top!r}, which no installed distribution provides'
    return {_normalise(d) for d in dists}


def test_runtime_imports_are_declared_dependencies():
    runtime, _test = _declared()
    undeclared = {top: where for top, where in _imports('steward').items()
                  if not _distributions(top, where) & runtime}
    assert undeclared == {}


def test_test_imports_are_declared():
    runtime, test = _declared()
    undeclared = {top: where for top, where in _imports('tests', 'bench', 'tools').items()
                  if not _distributions(top, where) & (runtime | test)}
    assert undeclared == {}


def test_every_declared_dependency_is_used():
    runtime, test = _declared()
    imported = set()
    for top, where in _imports('steward', 'tests', 'bench', 'tools').items():
        imported |= _distributions(top, where)
    unused = (runtime | test) - imported - USED_WITHOUT_IMPORT
    assert unused == set()


def test_runtime_code_needs_no_test_only_package():
    runtime, test = _declared()
    for top, where in _imports('steward').items():
        assert _distributions(top, where) & runtime, where

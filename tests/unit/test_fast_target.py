"""tools/fast-tests.txt, the fast target (`tools/test.sh --fast`, `tox -e fast`):
every path it names exists, and no functional module it names starts a server of
its own or is marked slow (those belong to the full suite)."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What starts a server, a side venv or a `steward` process in tests/.
EXTERNAL = ('pg_fixture', 'mariadb_fixture', 'multihost import rabbit', 'side_venv',
            'keystone_fixture', 'keystone_stack', 'cyborg_upstream', 'running_stack',
            'lifecycle_stack', 'nvme_stack', 'subprocess', 'pytest.mark.slow')


def _listed():
    lines = (ROOT / 'tools' / 'fast-tests.txt').read_text().splitlines()
    return [line for line in lines if line and not line.startswith('#')]


def test_every_listed_path_exists():
    listed = _listed()
    assert 'tests/unit' in listed
    assert [p for p in listed if not (ROOT / p).exists()] == []


def test_no_listed_functional_module_starts_a_server():
    found = {}
    for path in _listed():
        if path.startswith('tests/functional/'):
            text = (ROOT / path).read_text()
            hits = [name for name in EXTERNAL if name in text]
            if hits:
                found[path] = hits
    assert found == {}

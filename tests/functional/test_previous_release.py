"""The previous release (tests/fixtures/previous_release.py: a commit of main, from
the clone's history) reads and writes the schema of this tree (issue 37, items 1
and 2): its own database-layer tests, run by its own code in a side venv of its
own, on template databases made by this tree's ``steward db sync``.

What runs is the release's in-process tests of its database layer and of what
writes through it (the API in process, the conductor's ARQ, device, cleanup and
report operations, the state transitions, erase records, device history), on
SQLite and, when the machine has them, PostgreSQL and MariaDB (the release's own
fixtures: its tests parametrized over the three databases run on each, on
templates made by this tree's db sync). The same tests on a schema that lost one
column the release uses (what a contract migration applied too early does) fail:
the check has teeth.

The release's services in the multi-host topology beside this tree's, under load,
through a rolling upgrade: tests/multihost/test_rolling_upgrade.py.
"""
import os
import re
import subprocess
import sys

import pytest

from tests.fixtures import previous_release
from tests.fixtures import requirements

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)

# The release's tests of its database layer and of what writes through it, all in
# process (no server of their own but the PostgreSQL fixture).
DATABASE_TESTS = (
    'tests/functional/api/test_arqs.py',
    'tests/functional/api/test_device_profiles.py',
    'tests/functional/api/test_device_history.py',
    'tests/functional/test_arq_lifecycle.py',
    'tests/functional/test_control_path_unique.py',
    'tests/functional/test_device_history.py',
    'tests/functional/test_device_identity.py',
    'tests/functional/test_erase_record_states.py',
    'tests/functional/test_report_bind_race.py',
    'tests/unit/test_reservation.py',
)


@pytest.fixture(scope='module')
def venv():
    try:
        return previous_release.ensure()
    except previous_release.BuildError as err:
        requirements.need('pypi', f'the previous release\'s side venv: {err}')


def _run_release_tests(venv, tmp_path, paths, schema_bin):
    marks = tmp_path / 'schema-marks'
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('PYTEST_', 'STEWARD_REQUIRE', 'VIRTUAL_ENV'))}
    env.update(STEWARD_SCHEMA_BIN=schema_bin, STEWARD_SCHEMA_MARKS=str(marks),
               PYTHONDONTWRITEBYTECODE='1')
    out = subprocess.run(
        [os.path.join(venv, 'bin', 'python'), '-m', 'pytest', '-q', '-p',
         'no:cacheprovider', '-n', '2', '--basetemp', str(tmp_path / 'basetemp'),
         *paths], cwd=previous_release.SRC, env=env, capture_output=True, text=True,
        timeout=3600)
    return out, (marks.read_text().split('\n') if marks.exists() else [])


def test_the_release_is_the_recorded_commit(venv):
    out = subprocess.run([os.path.join(venv, 'bin', 'python'), '-c',
                          'from steward.db import migration; print(migration.head_revision())'],
                         capture_output=True, text=True, cwd='/', timeout=120)
    assert out.stdout.strip() == previous_release.SCHEMA, out.stderr


def test_its_database_tests_pass_on_this_trees_schema(venv, tmp_path):
    from steward.db import migration
    head = migration.head_revision()
    assert head != previous_release.SCHEMA      # else this proves nothing new
    out, marks = _run_release_tests(venv, tmp_path, DATABASE_TESTS, BIN)
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ''
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert int(re.search(r'(\d+) passed', summary).group(1)) >= 100, summary
    # Every template it copied was this tree's schema, not one of its own, on each
    # database the machine has.
    assert marks and {m.split()[1] for m in marks if m} == {head}, marks
    from tests.fixtures import mariadb_fixture
    from tests.fixtures import pg_fixture
    expected = {'sqlite'} | ({'postgresql+psycopg2'} if pg_fixture._bindir() else set()) \
        | ({'mysql+pymysql'} if mariadb_fixture.installed() else set())
    assert {m.split()[0] for m in marks if m} == expected, marks


def test_they_fail_on_a_schema_missing_a_column_it_uses(venv, tmp_path):
    """A contract step too early: this tree's schema without devices.last_error
    (made by a ``steward`` that runs db sync, then drops the column)."""
    shim = tmp_path / 'bin'
    shim.mkdir()
    (shim / 'steward').write_text(f'''#!{sys.executable}
import sys
import sqlalchemy as sa
from steward.cmd import main
code = main.main(sys.argv[1:])
url = [l.split('=', 1)[1].strip() for l in open(sys.argv[-1]) if l.startswith('connection')][0]
engine = sa.create_engine(url)
with engine.begin() as conn:
    conn.execute(sa.text('ALTER TABLE devices DROP COLUMN last_error'))
engine.dispose()
sys.exit(code)
''')
    (shim / 'steward').chmod(0o755)
    out, marks = _run_release_tests(
        venv, tmp_path, ['tests/functional/api/test_device_history.py'], str(shim))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert 'last_error' in out.stdout, out.stdout[-3000:]


def _arq_states(url):
    import httpx
    with httpx.Client(base_url=url, timeout=30) as api:
        return sorted((a['instance_uuid'], a['state'])
                      for a in api.get('/v2/accelerator_requests').json()['arqs'])


def test_one_host_upgrades_from_it_under_its_running_serve(venv, tmp_path):
    """The upgrade on one host, as doc/multihost.md orders it: the release's
    ``steward serve`` binds an instance; this tree's ``db sync`` runs under it and
    it keeps binding and releasing; restarted on the new schema it serves again
    (with ``[database] sync_on_startup = false``: the release migrates at start by
    default and cannot on a schema it does not know, the crash loop the issue
    found, shown here too); then this tree's serve takes over the same database and
    embedded Placement, the instances bound by the release intact."""
    import httpx

    from tests.fixtures.stack import bind_instance, release_instance, running_stack
    old = os.path.join(venv, 'bin', 'steward')
    state = tmp_path / 'state'
    state.mkdir()
    conf = tmp_path / 'sync.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {state}\n')
    profile = [{'name': 'upgrade-dp', 'groups': [{'resources:FPGA': '1'}]}]

    def version():
        return subprocess.run([os.path.join(BIN, 'steward'), 'db', 'version',
                               '--config-file', str(conf)], capture_output=True,
                              text=True, timeout=300).stdout.strip()

    with running_stack(steward=old, state_path=str(state)) as st:
        assert version() == previous_release.SCHEMA          # it migrated at start
        with httpx.Client(base_url=st.url, timeout=30) as api:
            api.post('/v2/device_profiles', json=profile).raise_for_status()
        first = bind_instance(st.url, st.placement_url, 'upgrade-dp', 'FPGA', 'bench-host')
        sync = subprocess.run([os.path.join(BIN, 'steward-manage'), 'db', 'sync',
                               '--config-file', str(conf)], capture_output=True,
                              text=True, timeout=300)
        assert sync.returncode == 0, sync.stderr
        from steward.db import migration
        assert version() == migration.head_revision() != previous_release.SCHEMA
        # Still serving on the new schema, reads and writes.
        second = bind_instance(st.url, st.placement_url, 'upgrade-dp', 'FPGA',
                               'bench-host')
        release_instance(st.url, st.placement_url, second)
        assert _arq_states(st.url) == [(first, 'Bound')]
    # The release restarted as it is configured by default: it cannot start.
    with pytest.raises(RuntimeError) as exited:
        with running_stack(steward=old, state_path=str(state)):
            pass
    assert "Can't locate revision" in str(exited.value)
    # As doc/multihost.md says to run it during the upgrade: it serves.
    with running_stack(steward=old, state_path=str(state),
                       extra_conf='[database]\nsync_on_startup = false\n') as st:
        assert _arq_states(st.url) == [(first, 'Bound')]
        third = bind_instance(st.url, st.placement_url, 'upgrade-dp', 'FPGA', 'bench-host')
    # This tree's serve takes over.
    with running_stack(state_path=str(state)) as st:
        assert _arq_states(st.url) == sorted([(first, 'Bound'), (third, 'Bound')])
        release_instance(st.url, st.placement_url, first)
        release_instance(st.url, st.placement_url, third)
        assert _arq_states(st.url) == []

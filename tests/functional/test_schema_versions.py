"""A service starting on a schema other than its release's (issue 37, item 2;
doc/contributor/schema-changes.md):

* newer (a later release's ``steward-manage db sync`` ran: revision 0999, a new
  nullable column, table and index): every service logs it and serves; ``steward
  serve``, which migrates at start, leaves it alone; ``db sync`` of this release
  has nothing to do; ``steward-status upgrade check`` warns;
* older (the previous release's schema) or none: ``steward api`` and ``steward
  conductor`` exit 3 with the advice to run ``steward-manage db sync``, without
  migrating; ``steward serve`` migrates it.

In process on SQLite, PostgreSQL and MariaDB (Root.sync_database, what each
command calls at start), then as the real commands (subprocesses), and ``steward
serve`` binding and releasing an instance on the newer schema.
"""
import json
import logging
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from steward.cmd import root as cmd_root
from steward.common import exception
from steward.db import migration
from steward.db import session
from tests.fixtures import previous_release
from tests.fixtures.stack import bind_instance, free_port, release_instance, running_stack

BIN = os.path.dirname(sys.executable)
FUTURE = '0999'


def future_release(database):
    """What a later release's migration does under running services: it only adds
    (a nullable column, a table, an index), and stamps its revision."""
    with database.engine.begin() as conn:
        conn.execute(sa.text('ALTER TABLE devices ADD COLUMN rack VARCHAR(36)'))
        conn.execute(sa.text('CREATE TABLE racks (id INTEGER PRIMARY KEY, '
                             'name VARCHAR(255) NOT NULL)'))
        conn.execute(sa.text('CREATE INDEX devices_rack_idx ON devices (rack)'))
        conn.execute(sa.text('UPDATE alembic_version SET version_num = :v'), {'v': FUTURE})


def _sqlite_at(tmp_path, conf, revision):
    url = f'sqlite:///{tmp_path / "steward.sqlite"}'
    conf.set_override('connection', url, group='database')
    database = session.Database(url)
    if revision is not None:
        migration.upgrade(database, revision)
    return database


def _sync(database, service):
    return cmd_root.Root(database=database).sync_database(service,
                                                          wait=service != 'api')


# --- in process: what each command does at start -------------------------------------------------
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
@pytest.mark.parametrize('service', ['api', 'conductor', 'serve'])
def test_a_newer_schema_is_logged_and_served_never_migrated(database, service, caplog):
    future_release(database)
    caplog.set_level(logging.INFO)
    state = _sync(database, service)
    assert (state.current, state.relation) == (FUTURE, 'newer')
    assert migration.current_revision(database) == FUTURE
    said = ' '.join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert f'at revision {FUTURE}, newer than this release knows' in said, said
    # This release's reads and writes of the rows it knows go on.
    with database.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO devices (uuid, type, vendor, model, hostname, status, "
            "device_state, created_at) VALUES ('d-new', 'NVME', '8086', '0a54', 'h', "
            "'enabled', 'available', '2026-01-01 00:00:00')"))
        assert conn.execute(sa.text(
            "SELECT rack FROM devices WHERE uuid = 'd-new'")).scalar() is None


def test_db_sync_of_this_release_leaves_a_newer_schema_alone(tmp_path, conf, caplog):
    database = _sqlite_at(tmp_path, conf, 'head')
    future_release(database)
    caplog.set_level(logging.WARNING)
    assert migration.upgrade(database).relation == 'newer'
    assert migration.current_revision(database) == FUTURE
    assert 'Not migrating' in caplog.text


@pytest.mark.parametrize('service', ['api', 'conductor'])
@pytest.mark.parametrize('revision', [previous_release.SCHEMA, None])
def test_an_older_schema_stops_api_and_conductor_with_the_advice(tmp_path, conf, service,
                                                                revision):
    database = _sqlite_at(tmp_path, conf, revision)
    with pytest.raises(exception.SchemaTooOld) as caught:
        _sync(database, service)
    text = str(caught.value)
    assert '"steward-manage db sync"' in text and f'steward {service} again' in text
    head = migration.head_revision()
    assert (f"at revision {revision}, older than this release's {head}" if revision
            else f"empty (no Steward schema; this release's is {head})") in text
    assert migration.current_revision(database) == revision       # not migrated


def test_serve_migrates_an_older_schema_at_start(tmp_path, conf):
    database = _sqlite_at(tmp_path, conf, previous_release.SCHEMA)
    assert _sync(database, 'serve').relation == 'current'
    assert migration.current_revision(database) == migration.head_revision()


def test_sync_on_startup_set_is_the_same_for_every_service(tmp_path, conf):
    database = _sqlite_at(tmp_path, conf, previous_release.SCHEMA)
    conf.set_override('sync_on_startup', False, group='database')
    with pytest.raises(exception.SchemaTooOld):
        _sync(database, 'serve')
    conf.set_override('sync_on_startup', True, group='database')
    assert _sync(database, 'conductor').relation == 'current'


def test_the_api_with_its_database_down_starts_unchecked(conf, caplog):
    url = f'postgresql+psycopg2://u:p@127.0.0.1:{free_port()}/steward'
    database = session.Database(url)
    caplog.set_level(logging.WARNING)
    try:
        assert _sync(database, 'api') is None
    finally:
        database.dispose()
    assert 'not checked at start, the database is unreachable' in caplog.text


# --- the commands --------------------------------------------------------------------------------
def _conf(tmp_path, url, extra=''):
    path = tmp_path / 'steward.conf'
    # A broker that is never reached: the schema is checked before the first
    # connection; the separate services refuse the in-process default.
    path.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n'
                    f'transport_url = rabbit://u:p@127.0.0.1:{free_port()}/\n'
                    f'[database]\nconnection = {url}\n{extra}')
    return str(path)


def _run(*argv, conf, timeout=300):
    out = subprocess.run([os.path.join(BIN, argv[0]), *argv[1:], '--config-file', conf],
                         capture_output=True, text=True, timeout=timeout)
    assert 'Traceback' not in out.stdout + out.stderr, out.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize('service', ['api', 'conductor'])
def test_api_and_conductor_on_an_older_schema_exit_3_with_the_advice(tmp_path, conf,
                                                                    service):
    database = _sqlite_at(tmp_path, conf, previous_release.SCHEMA)
    database.dispose()
    path = _conf(tmp_path, database.url)
    out = _run('steward', service, conf=path)
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert (f'steward: the database schema is at revision {previous_release.SCHEMA}, '
            f'older than this release') in out.stderr
    assert '"steward-manage db sync"' in out.stderr
    assert _run('steward', 'db', 'version', conf=path).stdout.strip() == \
        previous_release.SCHEMA


@pytest.mark.slow
def test_db_sync_and_status_on_a_newer_schema(tmp_path, conf):
    database = _sqlite_at(tmp_path, conf, 'head')
    future_release(database)
    database.dispose()
    path = _conf(tmp_path, database.url)
    out = _run('steward-manage', 'db', 'sync', conf=path)
    assert out.returncode == 0, out.stderr
    assert (f'Nothing to do: the database schema is at revision {FUTURE}, newer than '
            f'this release knows') in out.stdout
    out = _run('steward-status', 'upgrade', 'check', '--json', conf=path)
    assert out.returncode == 1, (out.stdout, out.stderr)      # a warning
    [schema] = [c for c in json.loads(out.stdout)['checks']
                if c['check'] == 'Database schema']
    assert schema['result'] == 1, schema                        # WARNING
    assert 'newer than this release knows' in schema['details']


@pytest.mark.slow
def test_serve_on_a_newer_schema_binds_and_releases(tmp_path, conf):
    database = _sqlite_at(tmp_path, conf, 'head')
    future_release(database)
    database.dispose()
    with running_stack(extra_conf=f'[database]\nconnection = {database.url}\n') as st:
        import httpx
        with httpx.Client(base_url=st.url, timeout=30) as api:
            api.post('/v2/device_profiles', json=[{'name': 'future-dp', 'groups': [
                {'resources:FPGA': '1'}]}]).raise_for_status()
        inst = bind_instance(st.url, st.placement_url, 'future-dp', 'FPGA', 'bench-host')
        release_instance(st.url, st.placement_url, inst)
        with httpx.Client(base_url=st.url, timeout=30) as api:
            assert api.get('/v2/accelerator_requests').json()['arqs'] == []
        log = st.log()
    assert f'at revision {FUTURE}, newer than this release knows' in log
    assert migration.current_revision(session.Database(database.url)) == FUTURE

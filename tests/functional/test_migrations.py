"""Schema migrations on a database that holds data, on SQLite, PostgreSQL and
MariaDB (batch mode): 0004 adds devices.last_error/missing_since/identity and device_history
without touching the rows already there."""
import threading
import time
import uuid

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from steward.db import migration
from steward.db import session
from tests.fixtures import requirements


@pytest.fixture(params=['sqlite', 'postgresql', 'mysql'])
def empty_db(request, tmp_path, conf):
    """An empty database (no schema) of this test's own; yields its Database."""
    if request.param == 'mysql':
        from tests.fixtures import mariadb_fixture
        server = mariadb_fixture.get_mariadb()
        if server is None:
            requirements.need('mariadb', 'MariaDB server binaries not installed')
        url = server.create_database('steward_mig_' + uuid.uuid4().hex[:12])
    elif request.param == 'postgresql':
        from tests.fixtures import pg_fixture
        server = pg_fixture.get_postgres()
        if server is None:
            requirements.need('postgres', 'PostgreSQL server binaries not installed')
        name = 'steward_mig_' + uuid.uuid4().hex[:12]
        server.psql(f'CREATE DATABASE {name}')
        url = server.url(name)
    else:
        url = f'sqlite:///{tmp_path / "steward.sqlite"}'
    conf.set_override('connection', url, group='database')
    database = session.Database(url)
    yield database
    database.dispose()


def test_0004_keeps_devices_and_adds_history(empty_db):
    migration.upgrade(empty_db, '0003')
    engine = empty_db.engine
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO devices (uuid, type, vendor, model, hostname, status, "
            "device_state, created_at) VALUES ('d-1', 'NVME', '8086', '0a54', 'h', "
            "'enabled', 'error', '2026-01-01 00:00:00')"))
    migration.upgrade(empty_db)
    assert migration.current_revision(empty_db) == migration.head_revision()
    inspector = sa.inspect(empty_db.engine)
    columns = {c['name']: c for c in inspector.get_columns('devices')}
    for name in ('last_error', 'missing_since', 'identity'):
        assert columns[name]['nullable'], name
    assert 'devices_identity_idx' in {i['name'] for i in inspector.get_indexes('devices')}
    history = {c['name'] for c in inspector.get_columns('device_history')}
    assert history == {'id', 'uuid', 'device_uuid', 'created_at', 'event', 'source_state',
                       'target_state', 'reason', 'request_id', 'actor'}
    assert inspector.get_foreign_keys('device_history') == []
    assert 'device_history_device_uuid_idx' in {
        i['name'] for i in inspector.get_indexes('device_history')}
    with empty_db.engine.begin() as conn:
        row = conn.execute(sa.text(
            'SELECT uuid, device_state, last_error, missing_since, identity '
            'FROM devices')).one()
        assert tuple(row) == ('d-1', 'error', None, None, None)
        # No foreign key: history of a device that no longer exists is kept.
        conn.execute(sa.text(
            "INSERT INTO device_history (uuid, device_uuid, created_at, event, "
            "target_state) VALUES ('h-1', 'gone', '2026-01-01 00:00:00', 'fail', "
            "'error')"))
    # A second run is a no-op.
    migration.upgrade(empty_db)
    assert migration.current_revision(empty_db) == migration.head_revision()


def _insert_device(conn, dev_id, uuid_, host, cpid_info, missing=False):
    conn.execute(sa.text(
        "INSERT INTO devices (id, uuid, type, vendor, model, hostname, status, "
        "device_state, missing_since, created_at) VALUES (:id, :uuid, 'NVME', '8086', "
        "'0a54', :host, 'enabled', 'error', :missing, '2026-01-01 00:00:00')"),
        {'id': dev_id, 'uuid': uuid_, 'host': host,
         'missing': '2026-01-02 00:00:00' if missing else None})
    conn.execute(sa.text(
        "INSERT INTO controlpath_ids (id, uuid, device_id, cpid_type, cpid_info, "
        "created_at) VALUES (:id, :uuid, :id, 'PCI', :info, '2026-01-01 00:00:00')"),
        {'id': dev_id, 'uuid': f'c-{uuid_}', 'info': cpid_info})


def test_0005_makes_names_and_control_paths_unique(empty_db):
    migration.upgrade(empty_db, '0004')
    slot = '{"bus": "0a", "device": "00", "domain": "0000", "function": "0"}'
    with empty_db.engine.begin() as conn:
        # A missing drive, and the drive now in its slot (what report.py did
        # before 0005); the same address on another host; another address.
        _insert_device(conn, 1, 'd-missing', 'h1', slot, missing=True)
        _insert_device(conn, 2, 'd-present', 'h1', slot)
        _insert_device(conn, 3, 'd-other-host', 'h2', slot)
        conn.execute(sa.text(
            "INSERT INTO deployables (uuid, name, num_accelerators, device_id, "
            "created_at) VALUES ('dep-1', 'h1_0000:0a:00.0', 1, 2, "
            "'2026-01-01 00:00:00')"))
    migration.upgrade(empty_db)
    assert migration.current_revision(empty_db) == migration.head_revision()
    with empty_db.engine.begin() as conn:
        # Not ||: MariaDB reads it as OR.
        rows = {uuid_: f'{host} {info}' for uuid_, host, info in conn.execute(sa.text(
            'SELECT d.uuid, c.hostname, c.cpid_info FROM controlpath_ids c '
            'JOIN devices d ON d.id = c.device_id')).all()}
    # The present drive keeps the address; the missing one gave it up.
    assert rows == {'d-present': f'h1 {slot}', 'd-other-host': f'h2 {slot}',
                    'd-missing': 'h1 released:d-missing'}
    with pytest.raises(db_exc.DBDuplicateEntry):
        with empty_db.engine.begin() as conn:
            conn.execute(sa.text(
                "UPDATE controlpath_ids SET cpid_info = :info WHERE device_id = 1"),
                {'info': slot})
    with pytest.raises(db_exc.DBDuplicateEntry):
        with empty_db.engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO deployables (uuid, name, num_accelerators, device_id, "
                "created_at) VALUES ('dep-2', 'h1_0000:0a:00.0', 1, 1, "
                "'2026-01-01 00:00:00')"))


def test_0005_refuses_deployables_sharing_a_name(empty_db):
    migration.upgrade(empty_db, '0004')
    with empty_db.engine.begin() as conn:
        _insert_device(conn, 1, 'd-1', 'h1', '{}')
        for n in (1, 2):
            conn.execute(sa.text(
                "INSERT INTO deployables (uuid, name, num_accelerators, device_id, "
                "created_at) VALUES (:uuid, 'same', 1, 1, '2026-01-01 00:00:00')"),
                {'uuid': f'dep-{n}'})
    with pytest.raises(RuntimeError, match="share a name.*'same'"):
        migration.upgrade(empty_db)
    # Nothing of 0005 stayed: the migration is one transaction.
    assert migration.current_revision(empty_db) == '0004'


# SQLite serialises writers itself: the lock is PostgreSQL's advisory lock and
# MariaDB's named lock.
@pytest.mark.parametrize('empty_db', ['postgresql', 'mysql'], indirect=True)
def test_two_conductors_starting_together_migrate_once(empty_db):
    barrier = threading.Barrier(2)
    errors = []

    def start():
        barrier.wait()
        try:
            migration.upgrade(session.Database(empty_db.url))
        except Exception as err:      # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert migration.current_revision(empty_db) == migration.head_revision()


def test_0006_adds_the_capability_decision_to_erase_records(empty_db):
    migration.upgrade(empty_db, '0005')
    with empty_db.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO erase_records (uuid, device_uuid, status, created_at) "
            "VALUES ('e-1', 'd-1', 'succeeded', '2026-01-01 00:00:00')"))
    migration.upgrade(empty_db)
    columns = {c['name']: c for c in sa.inspect(empty_db.engine)
               .get_columns('erase_records')}
    assert columns['capability_decision']['nullable']
    with empty_db.engine.begin() as conn:
        assert conn.execute(sa.text(
            'SELECT capability_decision FROM erase_records')).scalar() is None


@pytest.mark.parametrize('empty_db', ['mysql'], indirect=True)
def test_a_migration_waits_briefly_for_a_table_in_use_and_goes_on(empty_db, monkeypatch,
                                                                  caplog):
    """MariaDB: a transaction that holds the devices table (its metadata lock) while
    0009 alters it. The ALTER gives up after MYSQL_DDL_LOCK_WAIT instead of
    making every statement on the table queue behind it for 50 s; the
    migration is tried again past the columns added already, and completes once
    the transaction ends. (PostgreSQL's ALTER waits in the queue too, but its
    migration is one transaction and its services' transactions are short.)"""
    monkeypatch.setattr(migration, 'MYSQL_DDL_LOCK_WAIT', 1)
    migration.upgrade(empty_db, '0008')
    holder = empty_db.engine.connect()
    holder.begin()
    holder.execute(sa.text('SELECT count(*) FROM devices'))
    done = threading.Event()
    result = {}

    def run():
        try:
            result['state'] = migration.upgrade(empty_db)
        except Exception as err:  # noqa: BLE001 - asserted below
            result['error'] = err
        done.set()

    caplog.set_level('WARNING', logger='steward.db.migration')
    migrating = threading.Thread(target=run)
    migrating.start()
    try:
        # The table is held until the migration has given up on it once.
        while not any('trying again' in r.getMessage() for r in caplog.records):
            assert not done.is_set(), result
            time.sleep(0.1)
    finally:
        holder.rollback()
        holder.close()
    migrating.join()
    assert 'error' not in result, result
    assert result['state'].relation == 'older'
    assert migration.current_revision(empty_db) == migration.head_revision()
    columns = {c['name'] for c in sa.inspect(empty_db.engine).get_columns('devices')}
    assert {'health', 'health_conditions', 'health_read_at', 'health_fault'} <= columns

"""Schema migrations on a database that holds data, on SQLite and PostgreSQL (batch
mode): 0004 adds devices.last_error/missing_since/identity and device_history
without touching the rows already there."""
import uuid

import pytest
import sqlalchemy as sa

from steward.db import migration
from steward.db import session


@pytest.fixture(params=['sqlite', 'postgresql'])
def empty_db(request, tmp_path, conf):
    """An empty database (no schema) of this test's own; yields its URL."""
    if request.param == 'postgresql':
        from tests import pg_fixture
        server = pg_fixture.get_postgres()
        if server is None:
            pytest.skip('PostgreSQL server binaries not installed')
        name = 'steward_mig_' + uuid.uuid4().hex[:12]
        server.psql(f'CREATE DATABASE {name}')
        url = server.url(name)
    else:
        url = f'sqlite:///{tmp_path / "steward.sqlite"}'
    conf.set_override('connection', url, group='database')
    session.dispose()
    yield url
    session.dispose()


def test_0004_keeps_devices_and_adds_history(empty_db):
    migration.upgrade('0003')
    engine = session.get_engine()
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO devices (uuid, type, vendor, model, hostname, status, "
            "device_state, created_at) VALUES ('d-1', 'NVME', '8086', '0a54', 'h', "
            "'enabled', 'error', '2026-01-01 00:00:00')"))
    migration.upgrade()
    assert migration.current_revision() == migration.head_revision() == '0004'
    inspector = sa.inspect(session.get_engine())
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
    with session.get_engine().begin() as conn:
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
    migration.upgrade()
    assert migration.current_revision() == '0004'

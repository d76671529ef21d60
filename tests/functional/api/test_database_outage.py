"""The database stopping under a running API: a clean 503 cyb.service.unavailable
(oslo.db's DBConnectionError), never a 500, for the API's own reads and writes
and for the conductor's work. A MariaDB server of this test's own, stopped for
real."""
import tempfile

from starlette import testclient

from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.db import migration
from steward.db import session
from tests.fixtures import mariadb_fixture
from tests.fixtures import requirements
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.fixtures.stack import free_port


def _unavailable(r):
    assert r.status_code == 503, r.text
    assert r.json()['error_code'] == 'cyb.service.unavailable'
    assert 'Traceback' not in r.text


def test_a_database_outage_answers_503(transport, conf):
    if not mariadb_fixture.installed():
        requirements.need('mariadb', 'MariaDB server binaries not installed')
    server = mariadb_fixture.MariaDBServer(
        tempfile.mkdtemp(prefix='steward-mariadb-outage-'), free_port())
    manager = None
    try:
        server.start()
        url = server.create_database('steward')
        conf.set_override('connection', url, group='database')
        database = session.Database(url)
        migration.upgrade(database)
        manager = ConductorManager(cf.deps(database, transport))
        manager.init_host()
        app = roots.api_app(LocalConductorAPI(manager), database)
        with testclient.TestClient(app, raise_server_exceptions=False) as client:
            r = client.post('/v2/device_profiles', json=[{
                'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}])
            assert r.status_code == 201, r.text
            assert client.get('/v2/device_profiles').status_code == 200

            server.stop()
            _unavailable(client.get('/v2/device_profiles'))
            _unavailable(client.post('/v2/device_profiles', json=[{
                'name': 'dp2', 'groups': [{'resources:FPGA': '1'}]}]))
            # The conductor's own transaction (an ARQ create).
            _unavailable(client.post('/v2/accelerator_requests',
                                     json={'device_profile_name': 'dp1'}))
    finally:
        if manager is not None:
            manager.stop()
        server.stop()

"""A MariaDB server of the multi-host deployment's own (tests/fixtures/mariadb_fixture.py),
stopped and started by the database-restart tests, and a database on it. Not the
per-process server of the ``db`` fixture: a restart here must not cut the
functional tests' connections."""
import tempfile
import uuid

from tests.fixtures import mariadb_fixture
from tests.fixtures.stack import free_port


def server():
    """A new started server, or None when MariaDB is not installed."""
    if not mariadb_fixture.installed():
        return None
    srv = mariadb_fixture.MariaDBServer(
        tempfile.mkdtemp(prefix='steward-mh-mariadb-'), free_port())
    try:
        srv.start()
    except BaseException:
        srv.stop()
        raise
    return srv


def create_database(srv, prefix='steward_mh', driver='mysqldb'):
    name = f'{prefix}_{uuid.uuid4().hex[:10]}'
    return name, srv.create_database(name, driver=driver)


def stop(srv):
    """A clean shutdown: open sessions are cut, as in a server restart."""
    srv.shutdown()


def start(srv):
    srv.restart()

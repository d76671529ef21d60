"""One multi-host deployment per test process (each xdist worker its own), shared by
the multihost tests. Every test leaves it healthy and as it found it."""
import pytest

from tests import requirements
from tests.multihost import cluster as cluster_mod
from tests.multihost import rabbit


@pytest.fixture(scope='session')
def cluster():
    if not rabbit.installed():
        requirements.need('rabbitmq', 'rabbitmq-server is not installed '
                                      '(tools/system-packages.sh installs it)')
    from tests.multihost import pg
    if pg.server() is None:
        requirements.need('postgres', 'PostgreSQL server binaries are not installed')
    c = cluster_mod.Cluster().start()
    yield c
    c.stop()


@pytest.fixture
def healthy(cluster):
    """The deployment after the test is back to every service serving."""
    yield cluster
    cluster.wait_ready()


def pytest_collection_modifyitems(items):
    # One xdist worker runs them all (tools/test.sh uses --dist loadgroup), so the
    # ~40 s deployment is started once per run, not once per worker.
    for item in items:
        if '/tests/multihost/' in str(item.path):
            item.add_marker(pytest.mark.xdist_group('multihost'))

"""One multi-host deployment per test process (each xdist worker its own), shared by
the multihost tests. Every test leaves it healthy and as it found it."""
import pytest

# The shared checks' asserts say what differed, as a test module's do.
pytest.register_assert_rewrite('tests.multihost.flows', 'tests.multihost.chaos')

from tests.multihost import cluster as cluster_mod  # noqa: E402


@pytest.fixture(scope='session')
def cluster():
    cluster_mod.require()
    c = cluster_mod.Cluster().start()
    yield c
    c.stop()


@pytest.fixture
def healthy(cluster):
    """The deployment after the test is back to every service serving."""
    yield cluster
    cluster.wait_ready()


@pytest.fixture(scope='session')
def mariadb_cluster():
    """The same deployment on MariaDB, for the tests that must hold on both
    databases (``healthy_on``); started on first use."""
    cluster_mod.require('mysql')
    c = cluster_mod.Cluster(database='mysql').start()
    yield c
    c.stop()


@pytest.fixture(params=['postgresql', 'mysql'])
def healthy_on(request):
    """``healthy``, once on the PostgreSQL deployment and once on the MariaDB one."""
    name = 'cluster' if request.param == 'postgresql' else 'mariadb_cluster'
    c = request.getfixturevalue(name)
    yield c
    c.wait_ready()


# Modules that start deployments of their own (the previous release's, a Galera
# cluster) and never use the shared one: a group of their own, so that the other
# xdist worker can run them beside the shared deployment's (together they were the
# longest group of the suite, the whole run's critical path).
OWN_DEPLOYMENTS = ('test_rolling_upgrade.py', 'test_galera.py')


def pytest_collection_modifyitems(items):
    # One xdist worker runs each group (tools/test.sh uses --dist loadgroup), so
    # the ~40 s shared deployment is started once per run, not once per worker.
    for item in items:
        if '/tests/multihost/' in str(item.path):
            group = 'multihost-own' if item.path.name in OWN_DEPLOYMENTS else 'multihost'
            item.add_marker(pytest.mark.xdist_group(group))

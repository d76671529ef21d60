"""Shared fixtures: configuration reset and a real, migrated SQLite database per test.

A test that needs something from the machine says so with tests/fixtures/requirements.py's
``need()``: it skips, unless STEWARD_REQUIRE names that dependency (``.ci/run``
sets it), then it fails.

The schema is built once per session with the real Alembic migrations, then copied
for each test (a copy is ~100x faster than replaying migrations).
"""
import os
import shutil
import tempfile
import uuid
import warnings

import pytest
from oslo_config import cfg

warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')

from steward.conf import CONF  # noqa: E402
from tests.fixtures import requirements  # noqa: E402
from tests.fixtures import stack  # noqa: E402

CONF([], project='steward', default_config_files=[])


def pytest_configure(config):
    # STEWARD_REQUIRE (tests/fixtures/requirements.py): a typo is a usage error up front,
    # not a switch silently off.
    requirements.required()
    # The run's port claims (stack.free_port), made before the xdist workers start:
    # they and their subprocesses inherit the environment.
    if not hasattr(config, 'workerinput') and stack.PORTS_ENV not in os.environ:
        config.steward_ports = tempfile.mkdtemp(prefix='steward-ports-')
        os.environ[stack.PORTS_ENV] = config.steward_ports


def pytest_unconfigure(config):
    ports = getattr(config, 'steward_ports', None)
    if ports:
        shutil.rmtree(ports, ignore_errors=True)
        os.environ.pop(stack.PORTS_ENV, None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # Tests that share one deployment (tests/multihost, tests/nova, the Cyborg and
    # Keystone stacks) rely on --dist loadgroup running an xdist_group on one
    # worker. pytest-xdist marks a grouped test by appending '@group' to its node
    # id; when a pytest release breaks that (9.2 did), the groups split silently.
    if not getattr(config.option, 'loadgroup', False):
        return
    split = [item.nodeid for item in items
             if item.get_closest_marker('xdist_group') and '@' not in item.nodeid]
    if split:
        raise pytest.UsageError(
            f'--dist loadgroup is not keeping xdist groups together with this '
            f'pytest/pytest-xdist pair ({len(split)} grouped tests unmarked, e.g. '
            f'{split[0]}): check the pins in pyproject.toml')


def pytest_report_header(config):
    names = ','.join(sorted(requirements.required())) or 'none (missing dependencies skip)'
    return [f'{requirements.ENV}: {names}']


@pytest.fixture(scope='session')
def _template_db(tmp_path_factory):
    from steward.db import migration, session
    path = tmp_path_factory.mktemp('template') / 'steward.sqlite'
    template = session.Database(f'sqlite:///{path}')
    migration.upgrade(template)
    template.dispose()
    return path


def _overridable():
    from steward.conf import middleware
    from steward.conf import opts
    for group, group_opts in opts.list_opts() + middleware.documented_opts():
        yield (getattr(group, 'name', group)), group_opts


@pytest.fixture(autouse=True)
def _privsep_daemons():
    """A privsep daemon keeps the configuration and environment (the NVMe
    simulator's) of the moment it started: each test starts its own (also when
    a thread left by the previous one restarted one after its end)."""
    from steward import privsep
    privsep.stop_all()
    yield
    privsep.stop_all()


@pytest.fixture
def parsed_conf():
    """CONF parsed with no files: oslo.policy (the API) needs a parsed CONF, and the
    ``conf`` fixture's reset un-parses it. Modules that build the API in-process
    use it (``pytest.mark.usefixtures('parsed_conf')``)."""
    CONF([], project='steward', default_config_files=[])
    yield


@pytest.fixture
def conf():
    yield CONF
    # clear_override per option rather than CONF.reset(): reset also un-parses CONF
    # and oslo.policy then refuses to work in later tests.
    CONF.clear_override('connection', group='database')
    # oslo.messaging's own option, outside Steward's list: a rabbit:// URL left
    # behind made the next in-process RPC server of that worker retry an
    # unreachable broker forever.
    try:
        CONF.clear_override('transport_url')
    except cfg.NoSuchOptError:
        pass
    for group, opts in _overridable():
        for opt in opts:
            try:
                CONF.clear_override(opt.dest, group=group)
            except cfg.NoSuchOptError:      # listed for the sample, not registered
                pass


@pytest.fixture(scope='session')
def _pg_template():
    """A migrated PostgreSQL template database, or None without PostgreSQL."""
    from tests.fixtures import pg_fixture
    server = pg_fixture.get_postgres()
    if server is None:
        return None
    from steward.db import migration, session
    server.psql('DROP DATABASE IF EXISTS steward_template')
    server.psql('CREATE DATABASE steward_template')
    template = session.Database(server.url('steward_template'))
    migration.upgrade(template)
    template.dispose()
    return server


@pytest.fixture(scope='session')
def _mysql_template():
    """(MariaDB server, snapshot of a migrated database), or None without
    MariaDB: the Alembic migrations run once, each test gets a clone."""
    from tests.fixtures import mariadb_fixture
    server = mariadb_fixture.get_mariadb()
    if server is None:
        return None
    from steward.db import migration, session
    server.drop('steward_template')
    template = session.Database(server.create_database('steward_template'))
    migration.upgrade(template)
    template.dispose()
    return server, server.snapshot('steward_template')


@pytest.fixture(params=['sqlite'])
def db(request, _template_db, tmp_path, conf):
    """A migrated database of this test's own; yields its URL. SQLite by default;
    tests that must hold on PostgreSQL and MariaDB too use
    ``@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'],
    indirect=True)``; ``database`` is the Database on it. ``mysql`` goes through
    mysqlclient, the driver doc/multihost.md configures; ``mysql+pymysql``
    through PyMySQL, which earlier configurations name."""
    if request.param in ('mysql', 'mysql+pymysql'):
        found = request.getfixturevalue('_mysql_template')
        if found is None:
            requirements.need('mariadb', 'MariaDB server binaries not installed')
        server, snapshot = found
        url = server.clone(snapshot, 'steward_' + uuid.uuid4().hex[:12],
                           driver='pymysql' if request.param == 'mysql+pymysql'
                           else 'mysqldb')
    elif request.param == 'postgresql':
        server = request.getfixturevalue('_pg_template')
        if server is None:
            requirements.need('postgres', 'PostgreSQL server binaries not installed')
        name = 'steward_' + uuid.uuid4().hex[:12]
        server.psql(f'CREATE DATABASE {name} TEMPLATE steward_template')
        url = server.url(name)
    else:
        path = tmp_path / 'steward.sqlite'
        shutil.copy(_template_db, path)
        url = f'sqlite:///{path}'
    conf.set_override('connection', url, group='database')
    conf.set_override('state_path', str(tmp_path))
    yield url


@pytest.fixture
def transport(conf):
    """A steward.common.rpc.Transport on the configured transport_url (the
    in-process broker unless a test says otherwise), as a command's root builds
    it; closed after the test."""
    from steward.common import rpc
    built = rpc.Transport()
    yield built
    built.cleanup()


@pytest.fixture
def database(db):
    """The steward.db.session.Database on this test's ``db``, as a command's
    composition root builds it."""
    from steward.db import session
    built = session.Database(db)
    yield built
    built.dispose()

"""Shared fixtures: configuration reset and a real, migrated SQLite database per test.

The schema is built once per session with the real Alembic migrations, then copied
for each test (a copy is ~100x faster than replaying migrations).
"""
import shutil
import warnings

import pytest

warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')

from steward.conf import CONF  # noqa: E402

CONF([], project='steward', default_config_files=[])


@pytest.fixture(scope='session')
def _template_db(tmp_path_factory):
    from steward.db import migration, session
    path = tmp_path_factory.mktemp('template') / 'steward.sqlite'
    CONF.set_override('connection', f'sqlite:///{path}', group='database')
    session.dispose()
    migration.upgrade()
    session.dispose()
    CONF.clear_override('connection', group='database')
    return path


@pytest.fixture
def conf():
    yield CONF
    CONF.clear_override('connection', group='database')
    CONF.reset()


@pytest.fixture
def db(_template_db, tmp_path, conf):
    """A migrated SQLite file of this test's own; yields its URL."""
    from steward.db import session
    path = tmp_path / 'steward.sqlite'
    shutil.copy(_template_db, path)
    conf.set_override('connection', f'sqlite:///{path}', group='database')
    conf.set_override('state_path', str(tmp_path))
    session.dispose()
    yield f'sqlite:///{path}'
    session.dispose()

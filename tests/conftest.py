"""Shared fixtures: configuration reset and a real, migrated SQLite database per test.

The schema is built once per session with the real Alembic migrations, then copied
for each test (a copy is ~100x faster than replaying migrations).
"""
import shutil
import warnings

import pytest
from oslo_config import cfg

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


def _overridable():
    from steward.conf import opts
    for group, group_opts in opts.list_opts():
        yield (getattr(group, 'name', group)), group_opts


@pytest.fixture
def conf():
    yield CONF
    # clear_override per option rather than CONF.reset(): reset also un-parses CONF
    # and oslo.policy then refuses to work in later tests.
    CONF.clear_override('connection', group='database')
    for group, opts in _overridable():
        for opt in opts:
            try:
                CONF.clear_override(opt.dest, group=group)
            except cfg.NoSuchOptError:      # listed for the sample, not registered
                pass


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

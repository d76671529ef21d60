"""How many requests one API process works on at once, [api] handler_threads unset."""
import pytest

from steward.api import app
from steward.conf import CONF
from steward.db import session


@pytest.fixture(scope='module')
def postgresql():
    # The engine connects on first use only: nothing listens there.
    db = session.Database('postgresql+psycopg://steward:x@127.0.0.1:9/steward')
    yield db
    db.dispose()


@pytest.mark.parametrize('workers,cores,threads', [
    (1, 2, 4), (2, 2, 4), (3, 2, 2), (4, 2, 2), (8, 2, 1), (16, 2, 1),
    (4, 16, 4), (16, 16, 4), (32, 16, 2), (1, 1, 4), (2, 1, 2)])
def test_four_per_process_at_most_four_per_core_across_the_workers(
        postgresql, workers, cores, threads):
    assert app.handler_threads(postgresql, workers, cores) == threads


def test_sqlite_and_the_option(tmp_path, postgresql):
    lite = session.Database(f'sqlite:///{tmp_path}/s.sqlite')
    try:
        assert app.handler_threads(lite, 1, 2) == app.handler_threads(lite, 4, 2) == 2
        CONF.set_override('handler_threads', 7, group='api')
        try:
            assert app.handler_threads(lite, 1, 2) == 7
            assert app.handler_threads(postgresql, 4, 2) == 7
        finally:
            CONF.clear_override('handler_threads', group='api')
    finally:
        lite.dispose()


def test_one_process_by_default(postgresql):
    """steward serve, or a hosting server's process: four threads."""
    assert app.handler_threads(postgresql) == 4

"""A service meeting its database down at start: building the Database never
connects (the API starts and answers 503 until the database is back), and the
services that need it at start wait [database] max_retries times, then fail with
the driver's error."""
import logging

import pytest
import sqlalchemy as sa

from steward.db import session
from tests.fixtures.stack import free_port


def _unreachable_url():
    return f'postgresql+psycopg2://u:p@127.0.0.1:{free_port()}/steward'


def test_building_the_database_does_not_connect(conf):
    database = session.Database(_unreachable_url())
    try:
        with pytest.raises(sa.exc.OperationalError):
            with database.reader() as s:
                s.execute(sa.text('SELECT 1'))
    finally:
        database.dispose()


def test_wait_reachable_tries_max_retries_times_then_raises(conf, caplog):
    conf.set_override('max_retries', 3, group='database')
    conf.set_override('retry_interval', 0, group='database')
    database = session.Database(_unreachable_url())
    caplog.set_level(logging.WARNING, logger='steward.db.session')
    try:
        with pytest.raises(sa.exc.OperationalError):
            database.wait_reachable()
    finally:
        database.dispose()
    retries = [r for r in caplog.records if 'Database unreachable' in r.getMessage()]
    assert [r.getMessage().split(')')[0] for r in retries] == [
        'Database unreachable (attempt 1 of 3', 'Database unreachable (attempt 2 of 3']


def test_wait_reachable_returns_once_connected(conf, database):
    conf.set_override('max_retries', 1, group='database')
    database.wait_reachable()

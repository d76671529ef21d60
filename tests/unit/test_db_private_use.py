"""steward/db/session.py's private use of its libraries (issue 54, item 4), held
to the releases it was tested with: this fails on any other release, so a new
one is looked at (tools/newest-deps.sh) before upper-constraints.txt lets it in;
and the attributes still exist and do what the module relies on."""
from importlib import metadata

import pymysql
import pytest
from sqlalchemy import pool as pool_base

from steward.db import session


@pytest.mark.parametrize('package', sorted(session.PRIVATE_USE_TESTED))
def test_the_installed_release_is_one_tested(package):
    minor = '.'.join(metadata.version(package).split('.')[:2])
    assert minor in session.PRIVATE_USE_TESTED[package], (
        f'{package} {metadata.version(package)}: steward/db/session.py uses its private '
        f'attributes, checked with {session.PRIVATE_USE_TESTED[package]} only; check '
        f'them with this release, then add it to PRIVATE_USE_TESTED')


def test_the_pool_attributes_exist_and_take_effect(tmp_path):
    """On the engine the services build (oslo.db's, for a networked URL; its pool
    is built at construction, no connection made); MariaDB, where both are set."""
    engine = session._engine('mysql+pymysql://u:p@127.0.0.1:1/steward')
    try:
        assert engine.pool._pre_ping is False
        assert engine.pool._reset_on_return is pool_base.reset_none
        # What oslo.db gave before Steward changed them (so they are its, not new).
        fresh = pool_base.QueuePool(lambda: None, pre_ping=True)
        assert fresh._pre_ping is True
        assert fresh._reset_on_return is pool_base.reset_rollback
    finally:
        engine.dispose()


def test_pymysql_connections_keep_their_socket_there():
    conn = pymysql.connections.Connection(defer_connect=True)
    assert hasattr(conn, '_sock') and not hasattr(conn, 'fileno')

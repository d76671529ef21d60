"""Each of Steward's patches to Placement's internals (steward/placement/patches.py)
does what it says on the Placement this test process builds (the real one, on a
SQLite file), and each guard refuses or skips on a release series the patch was
not written for."""
import logging
import sqlite3
import threading

from oslo_config import cfg
import pytest
import sqlalchemy

from steward.common import exception
from steward.db import sqlite
from steward.placement import app
from steward.placement import patches
from tests.fixtures.placement_fixture import admin_session, get_placement, unique_name

ALL = [patches.register_quietly, patches.start_engine_apart,
       patches.serialize_sqlite_writers, patches.pool_sqlite_connections,
       patches.readers_apart, patches.check_schemas_once, patches.share_table_aliases,
       patches.hash_candidates_by_mappings, patches.watch_candidate_generation,
       patches.policy_from_defaults_only]


@pytest.fixture(scope='module')
def placement():
    return get_placement()


def _db_file():
    return sqlite.sqlite_file(app.built_url())


def _other_writer_blocked():
    """Can another connection take SQLite's write lock right now?"""
    other = sqlite3.connect(_db_file(), timeout=0, isolation_level=None)
    try:
        other.execute('BEGIN IMMEDIATE')
        other.execute('ROLLBACK')
        return False
    except sqlite3.OperationalError as err:
        assert 'locked' in str(err)
        return True
    finally:
        other.close()


def test_every_patch_is_guarded_and_tested_here():
    guarded = {n for n in dir(patches) if hasattr(getattr(patches, n), 'guard')}
    assert guarded == {p.__name__ for p in ALL}
    tests = {n for n in globals() if n.startswith('test_patch_')}
    assert tests == {f'test_patch_{p.__name__}' for p in ALL}


def test_patch_register_quietly():
    root = logging.getLogger()
    before = list(root.handlers)
    from oslo_log import formatters
    saved = formatters._CONF
    patches.register_quietly(cfg.ConfigOpts())
    assert root.handlers == before and formatters._CONF is saved


def test_patch_start_engine_apart(placement):
    # Placement's engine runs on its own URL, and oslo.db registered no [database]
    # group of its own on the global configuration (where Steward's lives).
    assert str(app.built_engine().url) == app.built_url()
    from steward.conf import CONF
    assert 'sqlite_busy_timeout' in CONF.database          # Steward's, untouched
    assert 'slave_connection' not in CONF.database


def test_patch_serialize_sqlite_writers(placement):
    import placement.db_api as db_api
    engine = app.built_engine()
    assert not [fn for fn in engine.dispatch.begin
                if getattr(fn, '__name__', '') == '_sqlite_emit_begin']
    # A Placement writer holds SQLite's write lock from its BEGIN (IMMEDIATE).
    with db_api.placement_context_manager.writer.using(_Ctx()) as session:
        session.execute(sqlalchemy.text('SELECT 1'))
        blocked = _other_writer_blocked()
    assert blocked
    # Its writers queue on a lock bounded by the busy timeout.
    held = threading.Event()
    release = threading.Event()

    def hold():
        with db_api.placement_context_manager.writer.using(_Ctx()) as session:
            session.execute(sqlalchemy.text('SELECT 1'))
            held.set()
            release.wait(10)
    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        assert _other_writer_blocked()
    finally:
        release.set()
        t.join()
    assert not _other_writer_blocked()


def test_patch_pool_sqlite_connections(placement):
    from oslo_db.sqlalchemy import engines
    engine = app.built_engine()
    assert isinstance(engine.pool, sqlalchemy.pool.QueuePool)
    assert not sqlalchemy.event.contains(engine, 'checkin', engines._thread_yield)


def test_patch_readers_apart(placement):
    import placement.db_api as db_api
    factory = db_api.placement_context_manager._factory
    assert factory.synchronous_reader is False
    # A reader takes no write lock: another writer proceeds meanwhile.
    with db_api.placement_context_manager.reader.using(_Ctx()) as session:
        session.execute(sqlalchemy.text('SELECT 1'))
        assert not _other_writer_blocked()


def test_patch_check_schemas_once(placement):
    import jsonschema
    from placement import util
    assert util.jsonschema.validate is not jsonschema.validate
    # Placement still refuses a body its schema refuses.
    with admin_session(placement.url) as s:
        r = s.post('/resource_providers', json={'name': unique_name(), 'bogus': 1})
    assert r.status_code == 400, r.text
    assert 'bogus' in r.text


def test_patch_share_table_aliases(placement):
    from placement.db.sqlalchemy import models
    from placement.objects import resource_provider
    table = models.ResourceProvider.__table__
    first = resource_provider.sa.alias(table, name='rp_x')
    assert resource_provider.sa.alias(table, name='rp_x') is first
    assert resource_provider.sa.alias(table, name='rp_y') is not first


def _host_of_one_unit_providers(url, rc, devices=8):
    with admin_session(url) as s:
        root = s.post('/resource_providers', json={'name': unique_name()}).json()['uuid']
        assert s.put(f'/resource_classes/{rc}').status_code in (201, 204)
        for _ in range(devices):
            rp = s.post('/resource_providers', json={
                'name': unique_name(), 'parent_provider_uuid': root}).json()['uuid']
            r = s.put(f'/resource_providers/{rp}/inventories', json={
                'resource_provider_generation': 0, 'inventories': {rc: {'total': 1}}})
            assert r.status_code == 200, r.text


def test_patch_hash_candidates_by_mappings(placement):
    from placement.objects import allocation_candidate as ac
    # Candidates that differ in their mappings only hash apart; equal ones alike.
    arr = ac.AllocationRequestResource(resource_provider=_Ctx(), resource_class='X',
                                       amount=1)
    arr.resource_provider.id = 1
    one = ac.AllocationRequest(resource_requests=[arr], mappings={'1': {'a'}, '2': {'b'}})
    other = ac.AllocationRequest(resource_requests=[arr], mappings={'1': {'b'}, '2': {'a'}})
    same = ac.AllocationRequest(resource_requests=[arr], mappings={'2': {'b'}, '1': {'a'}})
    assert one != other and hash(one) != hash(other)
    assert one == same and hash(one) == hash(same)
    # Eight one-unit groups on a host of eight: every candidate found is a way of
    # seating the groups (each GPU once), none twice, up to the cap.
    rc = 'CUSTOM_' + unique_name().upper().replace('-', '_')
    _host_of_one_unit_providers(placement.url, rc)
    query = {f'resources{i}': f'{rc}:1' for i in range(1, 9)}
    with admin_session(placement.url) as s:
        found = s.get('/allocation_candidates', params=dict(
            query, group_policy='none', limit='1000'), timeout=120).json()
    seatings = {tuple(tuple(m) for _, m in sorted(c['mappings'].items()))
                for c in found['allocation_requests']}
    assert len(found['allocation_requests']) == len(seatings) == 1000
    assert all(len({rp for (rp,) in seating}) == 8 for seating in seatings)


def test_patch_watch_candidate_generation(placement, caplog):
    import itertools
    import socket

    from placement.objects import allocation_candidate as ac

    from steward.placement import candidate_watch
    assert ac._generate_areq_lists.steward_watched
    ticks = itertools.count()

    def clock():                  # a second per reading: every reading looks
        return float(next(ticks))

    def generate(environ, leave_after):
        """What a request of ``environ`` generates, its client leaving after
        ``leave_after`` combinations (never: None), up to 100 000."""
        counted = []

        def app(_environ, _start_response):
            for n, _ in enumerate(candidate_watch.watched(range(100_000), clock)):
                if n == leave_after:
                    client.close()
                counted.append(n)
            return []
        candidate_watch.tracking(app)(environ, None)
        return len(counted)

    server, client = socket.socketpair()
    with server, client, caplog.at_level(logging.WARNING,
                                         logger=candidate_watch.__name__):
        # The client sent its next request already: still there.
        client.sendall(b'GET / HTTP/1.1\r\n')
        assert not candidate_watch.client_gone(server)
        server.recv(100)
        left = 10 * candidate_watch.CLOCK_EVERY
        # Gone: the generation stops at the next look.
        assert left < generate({'gunicorn.socket': server}, left) \
            <= left + candidate_watch.CLOCK_EVERY
        assert candidate_watch.client_gone(server)
    stopped = [r.getMessage() for r in caplog.records if 'abandoned' in r.getMessage()]
    warned = [r.getMessage() for r in caplog.records if 'generating' in r.getMessage()]
    assert len(stopped) == 1 and len(warned) == 1, caplog.text
    # Without a client socket (not served by gunicorn) it runs to the end.
    caplog.clear()
    assert generate({}, None) == 100_000


def test_patch_policy_from_defaults_only(placement):
    from placement import policy
    assert policy._ENFORCER.use_conf is False
    # Policy is still enforced: a non-admin token is refused.
    with admin_session(placement.url) as s:
        r = s.get('/resource_providers', headers={'X-Auth-Token': 'user',
                                                  'X-Roles': 'reader'})
    assert r.status_code in (401, 403), r.text


class _Ctx:
    """What oslo.db's enginefacade needs of a request context."""


@pytest.mark.parametrize('patch', ALL, ids=lambda p: p.__name__)
def test_guard_on_another_release(patch, monkeypatch, caplog):
    monkeypatch.setattr(patches, 'installed_major', lambda dist: patch.guard.major + 1)
    monkeypatch.setattr(patches.metadata, 'version',
                        lambda dist: f'{patch.guard.major + 1}.0.0')
    called = []

    def body(*args):
        called.append(args)
    body.__name__, body.guard = patch.__name__, patch.guard
    if patch.guard.required:
        with pytest.raises(exception.InvalidConfiguration, match=patch.__name__):
            patches.apply(body, 'x')
    else:
        with caplog.at_level(logging.WARNING, logger=patches.__name__):
            assert patches.apply(body, 'x') is False
        assert f'{patch.__name__} was written for {patch.guard.distribution}' \
            in caplog.text
    assert called == []
    # On the series it was written for, it runs.
    monkeypatch.setattr(patches, 'installed_major', lambda dist: patch.guard.major)
    assert patches.apply(body, 'x') is True and called == [('x',)]


def test_the_installed_releases_are_the_ones_written_for():
    """A new Placement, oslo.db or oslo.log release fails here first: read the
    patches again against it, then move their guards."""
    for patch in ALL:
        assert patches.installed_major(patch.guard.distribution) == patch.guard.major, \
            patch.__name__

"""The Nova-shaped hot path stays lean, and the listings' shortcuts stay right.

Statement counts, not timings (bench/arq_lifecycle.py prints those): each step of
the lifecycle runs a fixed number of SQL statements however many ARQs and devices
the database holds, so an N+1 query or a redundant re-read shows up here as a
failure, on any machine.
"""
import contextlib
import json
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from steward.api import views
from steward.common import states
from steward.db import arqs as arq_db
from steward.db import devices as device_db
from steward.db import models as m
from steward.db import transitions
from tests.functional.api.conftest import make_profile, mv

URL = '/v2/accelerator_requests'


@contextlib.contextmanager
def counted():
    """[statements] run on any engine while the block runs (BEGIN included)."""
    seen = []

    def record(conn, cursor, statement, *_):
        seen.append(statement.split()[0].upper())

    event.listen(sa.engine.Engine, 'before_cursor_execute', record)
    try:
        yield seen
    finally:
        event.remove(sa.engine.Engine, 'before_cursor_execute', record)


def _bind_body(arqs, rp, inst):
    return {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': 'host-a'},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
                        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]
            for a in arqs}


def _lifecycle(client, rp, profile='dp1'):
    """{step: statements} of one instance's create, bind, resolved GET, delete."""
    inst, steps = str(uuid.uuid4()), {}
    with counted() as seen:
        r = client.post(URL, json={'device_profile_name': profile})
    assert r.status_code == 201, r.text
    steps['create'] = seen
    with counted() as seen:
        r = client.patch(URL, json=_bind_body(r.json()['arqs'], rp, inst))
    assert r.status_code == 202, r.text
    steps['bind'] = seen
    with counted() as seen:
        r = client.get(URL, params={'instance': inst, 'bind_state': 'resolved'})
    assert r.status_code == 200 and r.json()['arqs'][0]['state'] == 'Bound'
    steps['resolved'] = seen
    with counted() as seen:
        r = client.delete(URL, params={'instance': inst})
    assert r.status_code == 204
    steps['delete'] = seen
    return steps


def test_each_lifecycle_step_runs_a_fixed_number_of_statements(client, seed):
    make_profile(client)
    first = _lifecycle(client, seed['rp'])
    # The device goes available -> allocated on the bind and back on the delete,
    # each with its history row: that is part of every count below.
    assert len(first['create']) == 3        # profile, BEGIN, INSERT
    assert len(first['bind']) == 8          # BEGIN, ARQs with the instance's
    #   other ARQs (one SELECT), deployables, devices locked with their counts, handle taken (UPDATE ...
    #   RETURNING), the ARQ's two transitions (one UPDATE), device transition,
    #   its history row
    # One statement, its own snapshot: no BEGIN on SQLite (Database.single_read).
    assert first['resolved'] == ['SELECT']  # ARQs with profile and handle
    assert len(first['delete']) == 6        # BEGIN, the instance's ARQs read,
    #   moved to Deleting and removed (one DELETE ... RETURNING), handle, device
    #   with its counts, device transition, history row (PostgreSQL and MariaDB:
    #   the device's row lock before its counts, one more)
    for name in ('create', 'bind', 'delete'):
        assert first[name].count('BEGIN') == 1, first[name]  # one transaction each
    # More rows in the database change nothing; with other instances holding the
    # device it stays allocated, so bind and delete leave its state alone. The
    # profile is known from the first create: its rows come with the INSERT.
    assert all(_hold(client, seed['rp']) for _ in range(5))
    again = {k: len(v) for k, v in _lifecycle(client, seed['rp']).items()}
    assert again == {'create': 2, 'bind': 6, 'resolved': 1, 'delete': 4}


# The first word each method of a MySQL driver's connection sends, but query's.
_SENDS = {'commit': 'COMMIT', 'rollback': 'ROLLBACK', 'autocommit': 'SET', 'ping': 'PING'}


@contextlib.contextmanager
def sent_to_mariadb(monkeypatch, url):
    """[first word of each command] the driver of ``url`` sends the server while
    the block runs (COMMIT, ROLLBACK and autocommit switches included, which no
    SQLAlchemy event sees). Both drivers' connection classes are Python's
    (mysqlclient's over its C one), and every command goes through their query,
    commit, rollback, autocommit or ping."""
    if url.startswith('mysql+pymysql'):
        from pymysql.connections import Connection
    else:
        from MySQLdb.connections import Connection
    seen = []

    def recorded(name, real):
        def call(self, *args, **kwargs):
            if name == 'query':
                sql = args[0]
                text = bytes(sql).decode() if isinstance(sql, (bytes, bytearray)) else sql
                seen.append(text.split()[0].upper())
            else:
                seen.append(_SENDS[name])
            return real(self, *args, **kwargs)
        return call

    with monkeypatch.context() as patch:
        for name in ('query', *_SENDS):
            patch.setattr(Connection, name, recorded(name, getattr(Connection, name)))
        yield seen


@pytest.mark.parametrize('db', ['mysql', 'mysql+pymysql'], indirect=True)
def test_on_mariadb_one_statement_is_sent_alone(client, seed, monkeypatch, db):
    """A read of one statement and the create's INSERT take connections that stay
    in autocommit (steward/db/session.py ``_autocommit``): no COMMIT or ROLLBACK
    round trip after them, and no switch of a connection's autocommit either
    way. The bind and the delete stay one transaction each, ended by a COMMIT.
    Through either driver."""
    make_profile(client)
    _lifecycle(client, seed['rp'])      # every pooled connection opened once
    with sent_to_mariadb(monkeypatch, db) as seen:
        r = client.get('/v2/device_profiles', params={'name': 'dp1'})
        assert r.status_code == 200 and len(r.json()['device_profiles']) == 1
    assert seen == ['SELECT']
    with sent_to_mariadb(monkeypatch, db) as seen:
        steps = _lifecycle(client, seed['rp'])
    assert steps['create'] == ['INSERT']    # the ARQ from the profile's row
    assert steps['resolved'] == ['SELECT']
    assert seen.count('ROLLBACK') == 0 and 'SET' not in seen, seen
    assert seen.count('COMMIT') == 2, seen              # the bind's, the delete's
    assert len(seen) == len(steps['create']) + len(steps['bind']) + 1 + \
        len(steps['resolved']) + len(steps['delete']) + 1


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_a_create_follows_a_profile_deleted_and_created_again(client, seed):
    """A create after the first takes its profile from what the first read, in
    the INSERT's own statement (arq_db.arqs_create_from); once that profile is
    gone, or replaced by another of its name, the create reads it again."""
    make_profile(client, groups=[{'resources:FPGA': '1'}])
    assert len(client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']) == 1
    with counted() as seen:
        arqs = client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']
    assert len(arqs) == 1 and 'SELECT' not in seen, seen

    def delete_profile():
        for arq in client.get(URL).json()['arqs']:
            assert client.delete(f'{URL}/{arq["uuid"]}').status_code == 204
        assert client.delete('/v2/device_profiles/dp1').status_code == 204

    delete_profile()
    r = client.post(URL, json={'device_profile_name': 'dp1'})
    assert r.status_code == 404 and 'dp1' in r.text, r.text
    assert client.get(URL).json()['arqs'] == []
    # Created again under its name with other groups, perhaps with the deleted
    # one's id (SQLite gives the highest id again once it is deleted).
    make_profile(client, groups=[{'resources:FPGA': '1'}])
    assert len(client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']) == 1
    delete_profile()
    make_profile(client, groups=[{'resources:FPGA': '2'}, {'resources:FPGA': '1'}])
    created = client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']
    assert sorted(a['device_profile_group_id'] for a in created) == [0, 0, 1]
    again = client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']
    assert sorted(a['device_profile_group_id'] for a in again) == [0, 0, 1]
    listed = client.get(URL).json()['arqs']
    assert {a['uuid'] for a in listed} == {a['uuid'] for a in created + again}
    assert {a['device_profile_name'] for a in listed} == {'dp1'}


def _lock_waits(conn):
    return conn.execute(sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()")).scalar()


@pytest.mark.parametrize('db', ['postgresql'], indirect=True)
def test_a_create_racing_its_known_profile_s_delete_answers_404(client, seed, db):
    """The profile is deleted while the create's one statement runs: it read the
    row, and the delete commits before its foreign key's check gets the row's
    lock (PostgreSQL checks the row as last committed). The create reads the
    profile again and answers 404, with nothing created."""
    make_profile(client)
    for arq in client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']:
        assert client.delete(f'{URL}/{arq["uuid"]}').status_code == 204
    engine = sa.create_engine(db)
    answer = {}
    try:
        with engine.connect() as deleting, engine.connect() as watching:
            watching.execution_options(isolation_level='AUTOCOMMIT')
            deleting.execute(sa.text("DELETE FROM device_profiles WHERE name = 'dp1'"))
            create = threading.Thread(target=lambda: answer.update(r=client.post(
                URL, json={'device_profile_name': 'dp1'})))
            create.start()
            # The create waits on the uncommitted delete's row lock.
            while _lock_waits(watching) == 0:
                assert create.is_alive(), answer
                time.sleep(0.05)
            deleting.commit()
            create.join()
    finally:
        engine.dispose()
    assert answer['r'].status_code == 404, answer['r'].text
    assert client.get(URL).json()['arqs'] == []


def _hold(client, rp):
    """Bind one ARQ to a new instance and leave it bound."""
    arqs = client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']
    return client.patch(URL, json=_bind_body(arqs, rp, str(uuid.uuid4()))).status_code \
        == 202


def test_a_multi_arq_bind_and_delete_are_one_transaction_each(database, client, seed):
    make_profile(client, 'four', [{'resources:FPGA': '4'}])
    steps = _lifecycle(client, seed['rp'], profile='four')
    assert steps['bind'].count('BEGIN') == steps['delete'].count('BEGIN') == 1
    # Four ARQs, one query for them: no statement per ARQ but the transitions
    # and the handles; the delete reads and removes the four in one DELETE.
    assert steps['bind'].count('SELECT') == 3
    assert steps['bind'].count('UPDATE') == 4 + 4 + 1   # handles, ARQs, device
    assert steps['delete'].count('DELETE') == 1
    assert steps['delete'].count('UPDATE') == 4 + 1     # handles, device
    with database.reader() as s:
        assert arq_db.arq_list(s) == []
        assert not s.execute(sa.select(m.AttachHandle).where(
            m.AttachHandle.in_use.is_(True))).first()
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE


def test_delete_finishes_an_arq_left_in_deleting(database, client, seed):
    """A row an older release left in Deleting (its process died between the two
    transactions it used) is finished by the next delete that names it."""
    make_profile(client)
    inst = str(uuid.uuid4())
    arqs = client.post(URL, json={'device_profile_name': 'dp1'}).json()['arqs']
    assert client.patch(URL, json=_bind_body(arqs, seed['rp'], inst)).status_code == 202
    with database.writer() as s:
        row = arq_db.arq_get_many(s, [arqs[0]['uuid']])[0]
        transitions.advance(s, m.ExtARQ, row, states.ARQ_DELETING, event='delete')
    assert client.delete(URL, params={'instance': inst}).status_code == 204
    with database.reader() as s:
        assert arq_db.arq_list(s) == []
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE


@pytest.mark.parametrize('version', ['2.0', '2.6'])
def test_listings_are_what_the_views_build_and_follow_changes(database, placement, client, seed,
                                                               version):
    """The listings reuse each row's JSON while the row is unchanged: the bytes are
    exactly json.dumps of the views, and a change shows at once."""
    def listed(path):
        r = client.get(path, headers=mv(version))
        assert r.status_code == 200
        return r

    r = listed('/v2/devices')
    assert r.json()['devices'][0]['hostname'] == 'host-a'
    assert listed('/v2/devices').content == r.content
    assert json.loads(r.content) == {'devices': [
        client.get(f'/v2/devices/{seed["device"]}', headers=mv(version)).json()]}
    assert client.post(f'/v2/devices/{seed["device"]}/disable').status_code == 200
    with database.writer() as s:
        s.execute(sa.update(m.Device).values(hostname='host-b'))
    after = listed('/v2/devices').json()['devices'][0]
    assert after['hostname'] == 'host-b'
    if version == '2.6':
        assert after['status'] == states.DEVICE_STATUS_MAINTAINING
    one = client.get(f'/v2/deployables/{seed["deployable"]}').json()
    deps = listed('/v2/deployables')
    assert deps.json() == {'deployables': [one]}
    assert deps.content == json.dumps({'deployables': [one]}).encode()
    with database.writer() as s:
        s.execute(sa.update(m.Attribute).where(m.Attribute.key == 'trait0')
                  .values(value='CUSTOM_CHANGED'))
    assert 'CUSTOM_CHANGED' in listed('/v2/deployables').json()[
        'deployables'][0]['attributes_list']
    # A filtered listing reads only its deployables' attributes, same document.
    filtered = client.get('/v2/deployables', params={'rp_uuid': seed['rp']})
    assert filtered.json() == listed('/v2/deployables').json()


def test_the_row_cache_is_bounded(monkeypatch, client, seed):
    monkeypatch.setattr(views, '_MAX_ENCODED', 2)
    monkeypatch.setattr(views, '_ENCODED', {})
    for version in ('2.0', '2.3', '2.5', '2.6'):
        assert client.get('/v2/devices', headers=mv(version)).status_code == 200
        assert len(views._ENCODED) <= 2

"""Deletes of one instance's ARQs racing each other stay idempotent.

Nova sends a delete again when the answer to the first was lost, while the first
may still be running; the seeded chaos storm (tests/multihost/test_chaos.py) met
it as ``409 cyb.state.concurrent_update`` to the second and an instance whose
allocation nobody dropped. Here the race is made certain rather than likely: the
test holds the ARQ's row lock while two deletes through the v2 API queue behind
it, then lets go. Both must answer 204, the device released once. PostgreSQL and
MariaDB (row locks; MariaDB's repeatable read too); SQLite admits one writer.
"""
import functools
import threading

import pytest
import sqlalchemy as sa
from starlette import testclient

from steward.arqs import device_ops
from steward.arqs import ops as arq_ops
from steward.common import context
from steward.conductor import cleanup_ops
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)
from tests.fixtures.stack import wait_for

URL = '/v2/accelerator_requests'

#: Statements moving the ARQ that wait for the row, in this test's database: the
#: delete's conditional DELETE (Deleting and the row's removal, transitions.remove).
_WAITING_ON_LOCKS = {
    'postgresql': "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                  " AND datname = current_database()"
                  " AND query LIKE 'DELETE FROM extended_accelerator_requests%'",
    # MariaDB's innodb_trx lists only the first of two waiters on a row.
    'mysql': "SELECT count(*) FROM information_schema.processlist"
             " WHERE db = DATABASE() AND command = 'Query'"
             " AND info LIKE 'DELETE FROM extended_accelerator_requests%'",
}


def _waiting(database, url):
    with database.reader() as s:
        return s.execute(sa.text(_WAITING_ON_LOCKS[url.split('+')[0]])).scalar()


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_two_deletes_of_one_instance_both_answer_204(database, db, life):
    st = life.start()
    (dev,) = st.devices()
    inst, arq = st.bind(dev)
    answers = []

    def delete():
        with testclient.TestClient(st.api.app, raise_server_exceptions=False) as api:
            r = api.delete(URL, params={'instance': inst})
            answers.append((r.status_code, r.text))

    threads = [threading.Thread(target=delete) for _ in range(2)]
    with database.writer() as s:
        s.execute(sa.text('SELECT id FROM extended_accelerator_requests'
                          ' WHERE uuid = :u FOR UPDATE'), {'u': arq})
        for t in threads:
            t.start()
        # Both read the ARQ Bound, and both wait for the row to move it to Deleting
        # and remove it.
        wait_for(lambda: _waiting(database, db) >= 2, 'two deletes waiting on the row')
    for t in threads:
        t.join()

    assert answers == [(204, '')] * 2
    assert st.api.get(URL, params={'instance': inst}).json()['arqs'] == []
    # Released once: cleaned and back in service, nothing held twice.
    st.wait_state(dev['uuid'], ('available',))
    assert [h['event'] for h in st.history(dev['uuid'])].count('release') <= 1


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_a_delete_waiting_on_a_failing_bind_removes_what_it_left(database, db, life,
                                                                  monkeypatch):
    """A bind that fails after its commit (Placement refused the reservation)
    moves its ARQ Bound -> BindFailed and frees the handle, while Nova's delete of
    the instance comes in. The delete's one statement waits for the row, then
    removes it as the failing bind left it (BindFailed, no handle): the device
    is released once, by the bind's undo, not a second time by the delete."""
    st = life.start()
    (dev,) = st.devices()
    inst, arq = st.bind(dev)
    holding, go = threading.Event(), threading.Event()
    real = device_ops.release_after_unbind

    def release_then_hold(*args, **kwargs):
        out = real(*args, **kwargs)
        if not holding.is_set():    # the failing bind's, not anyone's after it
            holding.set()
            assert go.wait(60)
        return out

    monkeypatch.setattr(device_ops, 'release_after_unbind', release_then_hold)
    ctx = context.get_admin_context()
    failing = threading.Thread(target=arq_ops._fail_bound, args=(
        st.conductor.deps, ctx, [arq], 'reservation refused'), kwargs={
        'dispatch': functools.partial(cleanup_ops.dispatch_cleanup, st.conductor.deps)})
    failing.start()
    assert holding.wait(60)
    answers = []

    def delete():
        with testclient.TestClient(st.api.app, raise_server_exceptions=False) as api:
            r = api.delete(URL, params={'instance': inst})
            answers.append((r.status_code, r.text))

    deleting = threading.Thread(target=delete)
    deleting.start()
    try:
        wait_for(lambda: _waiting(database, db) >= 1, 'the delete waiting on the row')
    finally:
        go.set()
        failing.join()
        deleting.join()

    assert answers == [(204, '')]
    assert st.api.get(URL, params={'instance': inst}).json()['arqs'] == []
    st.wait_state(dev['uuid'], ('available',))
    events = [h['event'] for h in st.history(dev['uuid'])]
    assert events.count('release_for_cleaning') == 1, events

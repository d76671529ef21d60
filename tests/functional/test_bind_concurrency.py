"""Binds on databases with parallel writers (PostgreSQL, MariaDB): what runs side
by side and what waits. SQLite's writers are serial (steward/db/sqlite.py)."""
import concurrent.futures
import threading
import time
import uuid

import pytest
from sqlalchemy import event

from steward.arqs import device_ops
from steward.arqs import ops as arq_ops
from steward.common import states
from steward.db import arqs as arq_db
from steward.db import attach_handles as handle_db
from steward.db import deployables as deployable_db
from steward.db import devices as device_db
from steward.db import models as m
from tests.functional import conductor_fixtures as cf
from tests.functional.test_arq_lifecycle import _bind

pytestmark = pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)


class _LeftOpen(Exception):
    """Rolls back the transaction a test left open half-way."""


def test_binds_to_an_allocated_device_do_not_wait_for_each_other(transport, database,
                                                                   db, conf):
    """A bind to a device allocated already share-locks it and takes its handle
    past the ones other binds are taking: a second bind completes while the first
    is still open, with another handle. Under an exclusive lock it would wait for
    the first's commit (16 boots on one shared device went one after another)."""
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    _bind(conductor, conductor.arq_create(cf.admin(), 'dp1', 'p')[0], dep)
    second = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    pool = concurrent.futures.ThreadPoolExecutor(1)
    finished_while_open = None
    with pytest.raises(_LeftOpen):
        with database.writer() as s:
            _, device_states = deployable_db.deployables_by_rp_uuids(s, [dep.rp_uuid])
            assert set(device_states.values()) == {states.DEV_ALLOCATED}
            device_ops.lock_for_bind(s, device_states)
            held = handle_db.attach_handle_allocate(s, dep)
            future = pool.submit(_bind, conductor, second, dep)
            # Bounded only for the failure's sake: a bind that waits for this
            # transaction never finishes before it ends.
            concurrent.futures.wait([future], timeout=120)
            finished_while_open = future.done()
            raise _LeftOpen()
    bound = future.result()[0]
    pool.shutdown()
    assert finished_while_open
    assert bound['state'] == states.ARQ_BOUND
    with database.reader() as s:
        taken = s.query(m.AttachHandle).filter_by(uuid=bound['attach_handle_uuid']).one()
        assert taken.id != held.id and taken.in_use
        assert device_db.device_list(s)[0].device_state == states.DEV_ALLOCATED


def test_a_bind_whose_device_was_released_under_its_share_lock_locks_it_again(
        transport, database, db, conf):
    """The bind read the device allocated; the last holder's release committed
    before the bind's share lock was granted, leaving it available: the bind is
    run again under an exclusive lock and takes the device through
    available -> allocated, as any first bind does. The first try, which wrote
    nothing, ends with a COMMIT: at a ROLLBACK psycopg drops every statement it
    prepared on the connection (device_ops.lock_for_bind)."""
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    first = _bind(conductor, conductor.arq_create(cf.admin(), 'dp1', 'p')[0], dep)[0]
    second = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    pool = concurrent.futures.ThreadPoolExecutor(1)
    rollbacks = []

    def rolled_back(conn):
        # The bind's (the pool's thread), not this test's reads of the lock waits.
        if threading.current_thread() is not threading.main_thread():
            rollbacks.append(conn)
    event.listen(database.engine, 'rollback', rolled_back)
    with database.writer() as s:
        # The last holder's unbind, its transaction open: the device row is
        # locked (allocated -> available, not committed yet).
        arq = arq_db.arq_get_many(s, [first['uuid']])[0]
        arq_ops._unbind_one(s, cf.admin(), arq)
        future = pool.submit(_bind, conductor, second, dep)
        # The bind reads "allocated" (the committed state) and waits for the lock.
        while cf.lock_waits(database) == 0 and not future.done():
            time.sleep(0.05)
        assert not future.done()
    bound = future.result()[0]
    pool.shutdown()
    event.remove(database.engine, 'rollback', rolled_back)
    assert bound['state'] == states.ARQ_BOUND
    assert rollbacks == []
    with database.reader() as s:
        device = device_db.device_list(s)[0]
        assert device.device_state == states.DEV_ALLOCATED
        moves = [(h.source_state, h.target_state) for h in
                 s.query(m.DeviceHistory).filter_by(device_uuid=device.uuid)
                 .order_by(m.DeviceHistory.created_at, m.DeviceHistory.id)]
    assert moves[-2:] == [(states.DEV_ALLOCATED, states.DEV_AVAILABLE),
                          (states.DEV_AVAILABLE, states.DEV_ALLOCATED)]


def _deadlocks(database):
    """Deadlocks the server has broken (PostgreSQL: this database's count;
    MariaDB: whether InnoDB has a latest one to show)."""
    with database.single_read() as conn:
        if conn.dialect.name == 'postgresql':
            return conn.exec_driver_sql(
                'SELECT deadlocks FROM pg_stat_database '
                'WHERE datname = current_database()').scalar()
        return int('LATEST DETECTED DEADLOCK' in cf.innodb_status(conn))


def test_boots_and_deletes_on_one_device_meet_no_deadlock(transport, database, db, conf):
    """Four Nova-like clients creating, binding and deleting on one shared device,
    side by side: each step takes its rows in an order the others follow, so the
    database never has to break a cycle (each one it breaks is a retry a second
    later, [database] db_retry_interval). On MariaDB it did at REPEATABLE READ:
    a bind's scan for a free handle kept the handles in use locked."""
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    before = _deadlocks(database)

    def life(_):
        for _ in range(30):
            arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
            instance = str(uuid.uuid4())
            _bind(conductor, arq, dep, instance)
            conductor.arq_delete(cf.admin(), instance_uuid=instance)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(life, range(4)))
    assert _deadlocks(database) == before
    with database.reader() as s:
        assert s.query(m.AttachHandle).filter_by(in_use=True).count() == 0
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE


def test_deletes_freeing_a_shared_devices_last_handles_release_it(transport, database,
                                                                  db, conf):
    """Two deletes free the last two handles of a shared device side by side, and
    each reads what its release decides on before the other has committed: the
    device still ends available. The release counts the handles in use once it
    holds the device's row lock, in a statement of its own; counted before that
    wait, each counted the other's handle in use and the device stayed allocated
    with none (found once by the storm above, in CI on PostgreSQL)."""
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    for _ in range(2):
        _bind(conductor, conductor.arq_create(cf.admin(), 'dp1', 'p')[0], dep)
    with database.reader() as s:
        first, second = [h.id for h in s.query(m.AttachHandle).filter_by(in_use=True)
                         .order_by(m.AttachHandle.id)]
    ctx, read, decided = cf.admin(), threading.Event(), {}

    def other_delete():
        with database.writer() as s:
            handle_db.attach_handle_release(s, second)
            decided['other'] = device_ops.release_after_unbind(s, dep.id, ctx)
            read.set()
            # Commits once this test's delete has read too, or waits for its lock.
            while not decided.get('this_read') and cf.lock_waits(database) == 0:
                time.sleep(0.02)

    pool = concurrent.futures.ThreadPoolExecutor(1)
    with database.writer() as s:
        handle_db.attach_handle_release(s, first)
        future = pool.submit(other_delete)
        assert read.wait(60)
        decided['this'] = device_ops.release_after_unbind(s, dep.id, ctx)
        decided['this_read'] = True
    future.result(timeout=60)
    pool.shutdown()
    with database.reader() as s:
        assert s.query(m.AttachHandle).filter_by(in_use=True).count() == 0
        assert device_db.device_list(s)[0].device_state == states.DEV_AVAILABLE

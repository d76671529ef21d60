"""A real deadlock on MariaDB and PostgreSQL, through the conductor's own bind:
the database rolls the bind's transaction back (DBDeadlock through oslo.db's
filters), steward/db/retry.py runs the whole transaction again, and the bind
completes with one handle, never two. When the retries run out the error
stays DBDeadlock (the API answers 503, tests/functional/api/test_database_outage.py).

The other side of the deadlock is a second connection taking the same two rows
in the opposite order (the attach handle, then the device the bind locked
first), after writing rows enough that the database picks the bind as the
victim (InnoDB rolls back the transaction that changed fewer rows)."""
import datetime
import logging
import threading
import time
import uuid

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from steward.common import states
from steward.db import models as m
from tests.functional import conductor_fixtures as cf

class OppositeOrder:
    """A transaction of its own on ``database`` that locks ``handle_id``, then,
    when asked, ``device_id``: the order opposite to a bind's."""

    def __init__(self, database, handle_id, device_id):
        self.engine = sa.create_engine(database.url)
        self.conn = self.engine.connect()
        self.device_id = device_id
        self.error = None
        self.conn.begin()
        # Weight: the victim is the transaction that changed fewer rows.
        self.conn.execute(m.DeviceHistory.__table__.insert(), [
            {'uuid': str(uuid.uuid4()), 'device_uuid': 'weight', 'event': 'weight',
             'target_state': 'available', 'created_at': datetime.datetime(2026, 1, 1)}
            for _ in range(50)])
        self.conn.execute(sa.text('SELECT id FROM attach_handles WHERE id = :id '
                                  'FOR UPDATE'), {'id': handle_id})
        self.thread = threading.Thread(target=self._close_the_cycle)

    def _close_the_cycle(self):
        try:
            self.conn.execute(sa.text('SELECT id FROM devices WHERE id = :id '
                                      'FOR UPDATE'), {'id': self.device_id})
            self.conn.commit()
        except Exception as err:  # noqa: BLE001 - asserted by the test
            self.error = err
            self.conn.rollback()

    def close(self):
        self.conn.close()
        self.engine.dispose()


def _setup(database, transport, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    dep = cf.deployable(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'proj')[0]
    with database.writer() as s:
        handle_id = s.execute(
            sa.select(m.AttachHandle.id).where(m.AttachHandle.deployable_id == dep.id)
            .order_by(m.AttachHandle.id).limit(1)).scalar()
        # Its only handle: a bind takes a free handle past the ones others hold
        # locked (SKIP LOCKED) and waits only when no other is free.
        s.execute(sa.delete(m.AttachHandle).where(
            m.AttachHandle.deployable_id == dep.id, m.AttachHandle.id != handle_id))
    return conductor, dep, arq, handle_id


def _bind_into(results, conductor, arq, dep):
    def bind():
        try:
            results['bind'] = conductor.arq_bind(cf.admin(), [{
                'uuid': arq['uuid'], 'hostname': 'host-a',
                'device_rp_uuid': dep.rp_uuid, 'instance_uuid': str(uuid.uuid4())}])
        except Exception as err:  # noqa: BLE001 - asserted by the test
            results['error'] = err
    return threading.Thread(target=bind)


class ClaimReached:
    """Set when the bind's attach-handle claim is sent: by then the bind holds its
    device's row lock (it locks it first), so the other side's request for that
    row closes the cycle whichever reaches the server first."""

    def __init__(self, database):
        self.engine = database.engine
        self.reached = threading.Event()
        sa.event.listen(self.engine, 'before_cursor_execute', self)

    def __call__(self, _conn, _cursor, statement, *_args):
        text = ' '.join(statement.split()).lower()
        # The claim that waits for a locked handle (not the one that skips it).
        if 'attach_handles' in text and 'skip locked' not in text and (
                'for update' in text or text.startswith('update attach_handles')):
            self.reached.set()

    def wait(self, binding, results, database):
        """Until the bind waits for the handle's lock: the first to wait is the
        one PostgreSQL's deadlock check (deadlock_timeout after it began
        waiting) finds the cycle from, and rolls back."""
        while not self.reached.wait(0.05):
            assert binding.is_alive(), f'the bind ended before its claim: {results}'
        while cf.lock_waits(database) == 0:
            assert binding.is_alive(), f'the bind ended before its wait: {results}'
            time.sleep(0.02)

    def remove(self):
        sa.event.remove(self.engine, 'before_cursor_execute', self)


def _race(conductor, database, dep, arq, handle_id):
    """The bind reaches its claim holding the device's lock; then the other
    transaction takes the handle and waits for the device: the opposite order,
    a deadlock. Returns (the other side, the bind's results)."""
    other = OppositeOrder(database, handle_id, dep.device_id)
    results = {}
    binding = _bind_into(results, conductor, arq, dep)
    claim = ClaimReached(database)
    try:
        binding.start()
        claim.wait(binding, results, database)
        other.thread.start()
        other.thread.join(60)
        binding.join(60)
    finally:
        claim.remove()
        other.close()
    return other, results


@pytest.mark.parametrize('db', ['postgresql', 'mysql'], indirect=True)
def test_a_bind_chosen_as_deadlock_victim_is_run_again(transport, database, db, conf,
                                                       caplog):
    conf.set_override('db_retry_interval', 0, group='database')
    conductor, dep, arq, handle_id = _setup(database, transport, conf)
    caplog.set_level(logging.DEBUG, logger='oslo_db.api')
    other, results = _race(conductor, database, dep, arq, handle_id)

    assert other.error is None, other.error      # the other side won, and committed
    assert 'error' not in results, results
    assert results['bind'][0]['state'] == states.ARQ_BOUND
    # It was the victim: the deadlock reached the retry, which ran the bind again.
    assert any('Deadlock' in r.getMessage() or 'deadlock' in r.getMessage()
               for r in caplog.records if r.name == 'oslo_db.api'), caplog.text
    with database.reader() as s:
        in_use = s.execute(sa.select(m.AttachHandle.id)
                           .where(m.AttachHandle.in_use.is_(True))).scalars().all()
        held = s.execute(sa.select(m.ExtARQ.attach_handle_id)).scalars().all()
        weight = s.execute(sa.select(sa.func.count()).select_from(m.DeviceHistory)
                           .where(m.DeviceHistory.device_uuid == 'weight')).scalar()
    assert in_use == held and len(in_use) == 1
    assert weight == 50


@pytest.mark.parametrize('db', ['mysql'], indirect=True)
def test_a_deadlock_past_the_retries_is_raised_as_such(transport, database, db, conf):
    conf.set_override('db_max_retries', 0, group='database')
    conductor, dep, arq, handle_id = _setup(database, transport, conf)
    other, results = _race(conductor, database, dep, arq, handle_id)
    assert isinstance(results.get('error'), db_exc.DBDeadlock), results
    # Rolled back as a whole: the ARQ is where it was, no handle taken.
    with database.reader() as s:
        state = s.execute(sa.select(m.ExtARQ.state)).scalar()
        in_use = s.execute(sa.select(sa.func.count()).select_from(m.AttachHandle)
                           .where(m.AttachHandle.in_use.is_(True))).scalar()
    assert (state, in_use) == (states.ARQ_INITIAL, 0)

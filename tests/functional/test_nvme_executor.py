"""The agent's cleanup executor with the real conductor and database: the per-device
lock, the pool bound, the timeout counted from the start of the work, failures and
agent stop. The driver here is a small stand-in whose cleanup just takes time (the
NVMe driver's own cleanup is exercised end to end elsewhere)."""
import json
import threading
import uuid

import pytest

from steward.agent import cleanup
from steward.common import exception
from steward.conductor.manager import ConductorManager
from steward.conductor.local_api import LocalConductorAPI
from steward.db import devices as device_db
from steward.db import erase_records as erase_db
from steward.db import models as m
from steward.drivers import base
from tests.functional import conductor_fixtures as cf

HOST = 'exec-host'


class GatedDriver(base.Driver):
    """A cleanup that reports progress, then holds until the test opens ``gate``
    (or its job is cancelled): the tests wait on these events, never on time."""
    name = 'slow'

    def __init__(self, fail=None, open_gate=False):
        super().__init__(None, HOST)
        self.fail = fail
        self.gate = threading.Event()
        if open_gate:
            self.gate.set()
        self.running = 0
        self.peak = 0
        self.finished = 0
        self.holding = 0                # reported progress, waiting at the gate
        self.calls = []
        self._cond = threading.Condition()

    def discover(self):
        return []

    def cleanup(self, device, job=None):
        with self._cond:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.calls.append(device['uuid'])
            self._cond.notify_all()
        try:
            job.progress('erase', 50.0, 'halfway')
            with self._cond:
                self.holding += 1
                self._cond.notify_all()
            while not self.gate.wait(0.02):
                job.check()             # raises once the job is cancelled
            if self.fail:
                raise self.fail
            job.record.update(action='slow', assurance_level='test', verification='passed')
        finally:
            with self._cond:
                self.running -= 1
                self.finished += 1
                self._cond.notify_all()

    def wait_until(self, predicate, what):
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self), timeout=60), what


@pytest.fixture
def conductor(transport, database, db):
    mgr = ConductorManager(cf.deps(database, transport))
    yield mgr


def _device(database, state='pending_cleaning'):
    with database.writer() as s:
        dev = m.Device(uuid=str(uuid.uuid4()), type='NVME', vendor='8086', model='0a54',
                       hostname=HOST, status='enabled', device_state=state,
                       std_board_info=json.dumps({'cleanup_action': 'slow'}))
        s.add(dev)
        s.flush()
        s.add(m.Deployable(uuid=str(uuid.uuid4()), name=f'{HOST}_{dev.uuid[:8]}',
                           num_accelerators=1, device_id=dev.id, driver_name='slow'))
        return dev.uuid


def _state(database, uuid_):
    with database.reader() as s:
        return device_db.device_get(s, uuid_).device_state


def _records(database, uuid_):
    with database.reader() as s:
        return [erase_db.erase_record_record(r) for r in erase_db.erase_record_list(s, uuid_)]


def _executor(conductor, driver, timeout=3600, workers=8):
    # timeout: [nvme] cleanup_timeout; only the test of the timeout gives a short one
    # (5 s could strike a cleanup that is meant to end otherwise on a loaded machine).
    return cleanup.CleanupExecutor(LocalConductorAPI(conductor), [driver], HOST,
                                   timeout=lambda: timeout, max_workers=workers)


def test_one_cleanup_per_device_however_often_it_is_asked(database, conductor):
    driver = GatedDriver()
    ex = _executor(conductor, driver, timeout=3600)
    dev = _device(database)
    ex.submit({'uuid': dev})
    driver.wait_until(lambda d: d.running == 1, 'the first cleanup never started')
    for _ in range(3):                  # asked again while it runs
        ex.submit({'uuid': dev})
    driver.gate.set()
    ex.wait(30)
    assert driver.calls == [dev]
    assert _state(database, dev) == 'available'
    assert [r['status'] for r in _records(database, dev)] == ['succeeded']


def test_the_pool_bounds_concurrency_and_the_timeout_starts_with_the_work(database, conductor):
    driver = GatedDriver()
    devs = [_device(database) for _ in range(5)]
    reads = []
    read = threading.Condition()

    def timeout():
        # [nvme] cleanup_timeout is read by a cleanup's supervisor once its work has
        # begun: record how many devices had begun (cleaning or done) at each read.
        # Counted under the lock: two supervisors reading at once append in the
        # order they counted (a count made outside could be appended after a
        # later, larger one).
        with read:
            begun = sum(_state(database, d) != 'pending_cleaning' for d in devs)
            reads.append(begun)
            read.notify_all()
        return 3600                     # the gate, not the timeout, ends the work

    ex = cleanup.CleanupExecutor(LocalConductorAPI(conductor), [driver], HOST,
                                 timeout=timeout, max_workers=2)
    for d in devs:
        ex.submit({'uuid': d})
    driver.wait_until(lambda d: d.running == 2, 'two cleanups never ran at once')
    with read:
        assert read.wait_for(lambda: len(reads) >= 2, timeout=60), reads
    # The pool is full and held: three wait in the queue, with no deadline running
    # (a timeout counted from the submission would have been read five times).
    assert [_state(database, d) for d in devs].count('pending_cleaning') == 3
    assert len(reads) == 2 and len(driver.calls) == 2
    driver.gate.set()
    ex.wait(30)
    assert driver.peak == 2
    assert [_state(database, d) for d in devs] == ['available'] * 5
    assert sorted(reads) == reads and len(reads) == 5
    assert all(seen >= n for n, seen in enumerate(reads, 1))


def test_timeout_cancels_and_the_device_goes_to_error(database, conductor):
    """[nvme] cleanup_timeout lowered under a running cleanup (a reload) ends it
    once it is past: the job cancelled, the device in error with the step it was
    in. Lowered once the driver reported its progress, so it strikes there however
    slow the machine."""
    driver = GatedDriver()                           # never opened: only the timeout ends it
    timeout = [3600]
    ex = cleanup.CleanupExecutor(LocalConductorAPI(conductor), [driver], HOST,
                                 timeout=lambda: timeout[0])
    dev = _device(database)
    supervisor = ex.submit({'uuid': dev})
    driver.wait_until(lambda d: d.holding == 1, 'the cleanup never reported progress')
    timeout[0] = 1
    supervisor.join(60)
    assert not supervisor.is_alive()
    assert _state(database, dev) == 'error'
    rec = _records(database, dev)[0]
    assert rec['error_code'] == 'cyb.cleanup.deadline_exceeded'
    assert 'erase 50 %' in rec['error_message'] and 'halfway' in rec['error_message']
    # The work stopped too: the driver's cleanup returned without the gate opening.
    driver.wait_until(lambda d: d.finished == 1, 'the cancelled cleanup kept running')
    assert driver.running == 0 and not driver.gate.is_set()


@pytest.mark.parametrize('fail,code', [
    (exception.Invalid(reason='x'), 'cyb.invalid'),
    (RuntimeError('disk on fire'), 'cyb.cleanup.failed'),
])
def test_driver_failures_end_in_error_with_their_code(database, conductor, fail, code):
    ex = _executor(conductor, GatedDriver(fail=fail, open_gate=True))
    dev = _device(database)
    ex.submit({'uuid': dev}).join(60)
    assert _state(database, dev) == 'error'
    rec = _records(database, dev)[0]
    assert rec['error_code'] == code and rec['status'] == 'failed'
    if isinstance(fail, RuntimeError):
        assert 'RuntimeError: disk on fire' in rec['error_message']


def test_a_device_that_is_not_pending_cleaning_is_left_alone(database, conductor):
    driver = GatedDriver(open_gate=True)
    ex = _executor(conductor, driver)
    for state in ('available', 'allocated', 'error'):
        dev = _device(database, state)
        ex.submit({'uuid': dev}).join(60)
        assert _state(database, dev) == state and _records(database, dev) == []
    assert driver.calls == []


def test_an_unknown_driver_is_a_failure_not_a_hang(database, conductor):
    ex = cleanup.CleanupExecutor(LocalConductorAPI(conductor), [], HOST,
                                 timeout=lambda: 3600)
    dev = _device(database)
    ex.submit({'uuid': dev}).join(60)
    assert _state(database, dev) == 'error'
    assert _records(database, dev)[0]['error_code'] == 'cyb.cleanup.unsupported'


def test_stopping_the_agent_reports_nothing(database, conductor):
    driver = GatedDriver()
    ex = _executor(conductor, driver, timeout=3600)
    dev = _device(database)
    thread = ex.submit({'uuid': dev})
    driver.wait_until(lambda d: d.running == 1, 'the cleanup never started')
    assert _state(database, dev) == 'cleaning'
    ex.stop()
    thread.join(10)
    assert _state(database, dev) == 'cleaning'                 # left for the next start's recovery
    assert _records(database, dev)[0]['status'] == 'running'
    assert ex.submit({'uuid': _device(database)}) is None


def test_progress_reaches_the_erase_record(database, conductor):
    driver = GatedDriver()
    ex = _executor(conductor, driver, timeout=3600)
    dev = _device(database)
    thread = ex.submit({'uuid': dev})
    # job.progress() is synchronous: once the driver holds, the record has it.
    driver.wait_until(lambda d: d.holding == 1, 'the cleanup never reported progress')
    rec = _records(database, dev)[0]
    assert (rec['status'], rec['phase'], rec['progress'], rec['progress_detail']) == \
        ('running', 'erase', 50.0, 'halfway')
    driver.gate.set()
    thread.join(30)
    assert _records(database, dev)[0]['phase'] == 'done'

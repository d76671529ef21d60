"""The agent's cleanup executor with the real conductor and database: the per-device
lock, the pool bound, the timeout counted from the start of the work, failures and
agent stop. The driver here is a small stand-in whose cleanup just takes time (the
NVMe driver's own cleanup is exercised end to end elsewhere)."""
import json
import threading
import time
import uuid

import pytest

from steward.agent import cleanup
from steward.common import exception
from steward.conductor.manager import ConductorManager
from steward.conductor.rpcapi import ConductorAPI
from steward.db import api as db
from steward.db import models as m
from steward.db import session
from steward.drivers import base
from tests.functional import conductor_fixtures as cf

HOST = 'exec-host'


class SlowDriver(base.Driver):
    name = 'slow'

    def __init__(self, seconds=0.3, fail=None):
        super().__init__(None, HOST)
        self.seconds, self.fail = seconds, fail
        self.running = 0
        self.peak = 0
        self.calls = []
        self._lock = threading.Lock()

    def discover(self):
        return []

    def cleanup(self, device, job=None):
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.calls.append(device['uuid'])
        try:
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline:
                job.check()
                job.progress('erase', 50.0, 'halfway')
                time.sleep(0.02)
            if self.fail:
                raise self.fail
            job.record.update(action='slow', assurance_level='test', verification='passed')
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def conductor(db):
    mgr = ConductorManager(None, notifier=cf.RecordingNotifier())
    yield mgr


def _device(state='pending_cleaning'):
    with session.writer() as s:
        dev = m.Device(uuid=str(uuid.uuid4()), type='NVME', vendor='8086', model='0a54',
                       hostname=HOST, status='enabled', device_state=state,
                       std_board_info=json.dumps({'cleanup_action': 'slow'}))
        s.add(dev)
        s.flush()
        s.add(m.Deployable(uuid=str(uuid.uuid4()), name=f'{HOST}_{dev.uuid[:8]}',
                           num_accelerators=1, device_id=dev.id, driver_name='slow'))
        return dev.uuid


def _state(uuid_):
    with session.reader() as s:
        return db.device_get(s, uuid_).device_state


def _records(uuid_):
    with session.reader() as s:
        return [db.erase_record_record(r) for r in db.erase_record_list(s, uuid_)]


def _executor(conductor, driver, timeout=5, workers=8):
    return cleanup.CleanupExecutor(ConductorAPI(conductor), [driver], HOST,
                                   timeout=lambda: timeout, max_workers=workers)


def test_one_cleanup_per_device_however_often_it_is_asked(conductor):
    driver = SlowDriver(0.3)
    ex = _executor(conductor, driver)
    dev = _device()
    for _ in range(4):
        ex.submit({'uuid': dev})
    ex.wait(10)
    assert driver.calls == [dev]
    assert _state(dev) == 'available'
    assert [r['status'] for r in _records(dev)] == ['succeeded']


def test_the_pool_bounds_concurrency_and_the_timeout_starts_with_the_work(conductor):
    driver = SlowDriver(0.6)
    ex = _executor(conductor, driver, timeout=1, workers=2)
    devs = [_device() for _ in range(5)]
    start = time.monotonic()
    for d in devs:
        ex.submit({'uuid': d})
    ex.wait(20)
    assert driver.peak == 2
    assert time.monotonic() - start >= 1.8            # 3 rounds of 0.6 s
    # The last one waited 1.2 s in the queue, more than the 1 s timeout: not counted.
    assert [_state(d) for d in devs] == ['available'] * 5


def test_timeout_cancels_and_the_device_goes_to_error(conductor):
    driver = SlowDriver(30)
    ex = _executor(conductor, driver, timeout=1)
    dev = _device()
    t0 = time.monotonic()
    ex.submit({'uuid': dev}).join(10)
    assert time.monotonic() - t0 < 5
    assert _state(dev) == 'error'
    rec = _records(dev)[0]
    assert rec['error_code'] == 'cyb.cleanup.deadline_exceeded'
    assert 'erase 50 %' in rec['error_message'] and 'halfway' in rec['error_message']
    time.sleep(0.1)
    assert driver.running == 0                       # the work stopped too


@pytest.mark.parametrize('fail,code', [
    (exception.Invalid(reason='x'), 'cyb.invalid'),
    (RuntimeError('disk on fire'), 'cyb.cleanup.failed'),
])
def test_driver_failures_end_in_error_with_their_code(conductor, fail, code):
    ex = _executor(conductor, SlowDriver(0.05, fail=fail))
    dev = _device()
    ex.submit({'uuid': dev}).join(10)
    assert _state(dev) == 'error'
    rec = _records(dev)[0]
    assert rec['error_code'] == code and rec['status'] == 'failed'
    if isinstance(fail, RuntimeError):
        assert 'RuntimeError: disk on fire' in rec['error_message']


def test_a_device_that_is_not_pending_cleaning_is_left_alone(conductor):
    driver = SlowDriver(0.05)
    ex = _executor(conductor, driver)
    for state in ('available', 'allocated', 'error'):
        dev = _device(state)
        ex.submit({'uuid': dev}).join(10)
        assert _state(dev) == state and _records(dev) == []
    assert driver.calls == []


def test_an_unknown_driver_is_a_failure_not_a_hang(conductor):
    ex = cleanup.CleanupExecutor(ConductorAPI(conductor), [], HOST, timeout=lambda: 5)
    dev = _device()
    ex.submit({'uuid': dev}).join(10)
    assert _state(dev) == 'error'
    assert _records(dev)[0]['error_code'] == 'cyb.cleanup.unsupported'


def test_stopping_the_agent_reports_nothing(conductor):
    driver = SlowDriver(30)
    ex = _executor(conductor, driver)
    dev = _device()
    thread = ex.submit({'uuid': dev})
    deadline = time.monotonic() + 5
    while _state(dev) != 'cleaning':
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ex.stop()
    thread.join(10)
    assert _state(dev) == 'cleaning'                 # left for the next start's recovery
    assert _records(dev)[0]['status'] == 'running'
    assert ex.submit({'uuid': _device()}) is None


def test_progress_reaches_the_erase_record(conductor):
    ex = _executor(conductor, SlowDriver(1.5))
    dev = _device()
    thread = ex.submit({'uuid': dev})
    deadline = time.monotonic() + 5
    while not _records(dev) or _records(dev)[0]['phase'] != 'erase':
        assert time.monotonic() < deadline
        time.sleep(0.05)
    rec = _records(dev)[0]
    assert (rec['status'], rec['progress'], rec['progress_detail']) == \
        ('running', 50.0, 'halfway')
    thread.join(10)
    assert _records(dev)[0]['phase'] == 'done'

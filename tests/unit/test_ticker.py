"""steward/common/ticker.py: periodic work whose interval a reload may change."""
import threading
import time

from steward.common import ticker


def _counting(interval, at_once=False):
    runs = []
    ran = threading.Event()

    def work():
        runs.append(time.monotonic())
        ran.set()
    return ticker.Ticker('t', work, lambda: interval[0], at_once=at_once), runs, ran


def test_a_new_interval_counts_from_the_wake():
    interval = [3600]
    t, runs, ran = _counting(interval, at_once=True)
    t.start()
    try:
        assert ran.wait(10) and len(runs) == 1
        ran.clear()
        # Not woken: the hour-long wait in progress goes on.
        interval[0] = 0.05
        assert not ran.wait(0.5)
        t.wake()
        assert ran.wait(10)
        deadline = time.monotonic() + 10
        while len(runs) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(runs) >= 4
    finally:
        t.stop()


def test_work_that_cannot_go_on_ends_the_thread_and_stop_ends_a_wait():
    t = ticker.Ticker('t', lambda: False, lambda: 0.01, at_once=True)
    t.start()
    thread = t._thread
    thread.join(10)
    assert not thread.is_alive()
    waiting, runs, _ = _counting([3600])
    waiting.start()
    started = time.monotonic()
    waiting.stop(10)
    assert time.monotonic() - started < 5 and runs == []


def test_run_soon_ends_the_wait_once_and_the_interval_counts_from_that_run():
    interval = [3600]
    t, runs, ran = _counting(interval, at_once=True)
    t.start()
    try:
        assert ran.wait(10) and len(runs) == 1
        ran.clear()
        t.run_soon()
        assert ran.wait(10) and len(runs) == 2
        ran.clear()
        # Back to the hour-long wait: no run without another request.
        assert not ran.wait(0.5)
    finally:
        t.stop()

"""`steward serve` keeps its embedded Placement running.

One thread waits on the child (so a dead child is reaped at once, never left a
zombie) and starts a new one when it dies, after a back-off that doubles from
``BACKOFF_START`` up to ``BACKOFF_MAX`` seconds: one log line and one count of
``steward_healed_total{what="placement_restarted"}`` per restart. A child that
cannot be started again ``[placement] embedded_restart_attempts`` times in a row
(or keeps dying within ``STABLE`` seconds of its start) stops `steward serve`
with a non-zero status, so that its service manager restarts the whole unit.

The new child is forked from this thread, and its PR_SET_PDEATHSIG follows the
thread that forked it (steward/lifetime.py): the thread lives as long as the
child may, and ends only when serve stops it (or gives up).
"""
import logging
import threading
import time

from steward.common import exception

LOG = logging.getLogger(__name__)

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
# A child that answered for this long counts as a success: the next death starts
# the back-off and the attempts over.
STABLE = 60.0


class PlacementSupervisor:
    """``child``: the running EmbeddedProcess (answering); ``start``: a callable
    returning a new one, answering, or raising EmbeddedPlacementError;
    ``on_restart()`` is called after each restart (the metric), ``on_fatal()`` once
    when the attempts are spent."""

    def __init__(self, child, start, attempts, on_restart=None, on_fatal=None):
        self.child = child
        self._start = start
        self._attempts = attempts
        self._on_restart = on_restart or (lambda: None)
        self._on_fatal = on_fatal or (lambda: None)
        self._stopping = threading.Event()
        self._lock = threading.Lock()       # the child, between here and stop()
        self._thread = None
        self.restarts = 0

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='steward-placement-supervisor')
        self._thread.start()
        return self

    def _run(self):
        failures = 0
        while True:
            child = self.child
            started = time.monotonic()
            status = child.wait_exit()          # reaps it
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE:
                failures = 0
            reason = f'exited with status {status}'
            while True:
                failures += 1
                if failures > self._attempts:
                    LOG.critical('Embedded Placement (pid %d) %s and could not be '
                                 'restarted (%d attempts); stopping steward serve',
                                 child.pid, reason, self._attempts)
                    self._on_fatal()
                    return
                delay = min(BACKOFF_START * 2 ** (failures - 1), BACKOFF_MAX)
                if self._stopping.wait(delay):
                    return
                try:
                    new = self._start()
                except exception.EmbeddedPlacementError as err:
                    LOG.error('Embedded Placement: restart %d of %d failed: %s',
                              failures, self._attempts, str(err).split('\n')[0])
                    continue
                break
            with self._lock:
                if self._stopping.is_set():
                    new.stop()
                    return
                self.child = new
            self.restarts += 1
            LOG.warning('Embedded Placement (pid %d) %s; restarted as pid %d after '
                        '%.0f s (attempt %d of %d)', child.pid, reason, new.pid,
                        delay, failures, self._attempts)
            self._on_restart()

    def stop(self, timeout=30.0):
        """Stop supervising and stop the child; returns its exit status."""
        self._stopping.set()
        with self._lock:
            child = self.child
        status = child.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        return status

"""Periodic work whose interval is an option a reload may change.

futurist's PeriodicWorker fixes a callable's spacing when it is decorated and has
the next run already scheduled: a ``[agent] discovery_interval`` lowered from an
hour to a minute by SIGHUP would wait out the hour first. A ``Ticker`` reads its
interval before every wait, and ``wake()`` (what a reload calls when the option
changed) ends the wait in progress so the next one is counted with the new value.
"""
import logging
import threading

LOG = logging.getLogger(__name__)


class Ticker:
    """``work()`` in a thread of its own, every ``interval()`` seconds counted from
    the end of the previous run; first at once when ``at_once``. ``work`` returning
    False ends the thread (it cannot go on)."""

    def __init__(self, name, work, interval, at_once=False):
        self.name = name
        self._work = work
        self._interval = interval
        self._at_once = at_once
        self._event = threading.Event()
        self._stopping = False
        self._now = False
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self):
        """The interval changed: wait again, with the new one, from now."""
        self._event.set()

    def run_soon(self):
        """Run once more as soon as a run in progress ends (at once when waiting);
        the interval counts from that run."""
        self._now = True
        self._event.set()

    def stop(self, timeout=30):
        """Stop; a run in progress finishes first (up to ``timeout`` seconds)."""
        self._stopping = True
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self):
        if not self._at_once:
            self._pause()
        while not self._stopping:
            if self._work() is False:
                return
            self._pause()

    def _pause(self):
        while not self._stopping:
            seconds = self._interval()
            if not self._event.wait(seconds):
                return
            self._event.clear()
            if self._now:
                self._now = False
                return
            if not self._stopping:
                LOG.info('%s: interval now %ss, counted from now', self.name,
                         self._interval())

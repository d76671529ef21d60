"""What a driver's ``cleanup(device, job)`` is handed: the cancel flag, the progress
sink and the erase record being filled in. Built by the agent's cleanup executor;
tests build one directly."""
import threading
import time

from steward.common import exception


class CleanupJob:
    def __init__(self, device_uuid, on_progress=None, min_interval=1.0):
        self.device_uuid = device_uuid
        self.cancelled = threading.Event()
        self.cancel_reason = None
        self.record = {}
        self.phase = 'queued'
        self.percent = None
        self.detail = None
        self._on_progress = on_progress
        self._min_interval = min_interval
        self._last_sent = 0.0
        self._lock = threading.Lock()

    def cancel(self, reason):
        self.cancel_reason = reason
        self.cancelled.set()

    def check(self):
        """Raise Interrupted when the job was cancelled (timeout, agent stop)."""
        if self.cancelled.is_set():
            raise exception.Interrupted(device=self.device_uuid,
                                        reason=self.cancel_reason or 'cancelled')

    def progress(self, phase, percent=None, detail=None):
        """Note the current step; forwarded at most once per ``min_interval`` while
        the phase stays the same, at once when it changes."""
        with self._lock:
            changed = phase != self.phase
            self.phase, self.percent = phase, percent
            if detail is not None or changed:
                self.detail = detail
            now = time.monotonic()
            if self._on_progress is None or (
                    not changed and now - self._last_sent < self._min_interval):
                return
            self._last_sent = now
            snapshot = (self.phase, self.percent, self.detail)
        self._on_progress(*snapshot)

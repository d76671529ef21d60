"""The agent's cleanup executor (spec 1): pending_cleaning -> cleaning -> the driver's
locked-in action -> available or error, one device at a time per device, several
devices at once.

* Work runs in a futurist thread pool (``MAX_WORKERS`` cleanups at once per host);
  a supervisor thread per request waits for it until ``[nvme] cleanup_timeout``,
  counted from the moment the cleanup really starts (device lock taken, device in
  cleaning), not from when it was queued; the option is read again every second,
  so a reload applies to the cleanups running.
* A per-device lock: a second request for a device being cleaned waits for the
  first (it will then find the device no longer pending_cleaning and do nothing).
* A timeout cancels the job (the driver stops at its next check: sanitize cannot be
  aborted on the controller, polling it can) and the device goes to error.
* Every state change and the erase record go through the conductor; the agent has
  no database.
* Stopping the agent cancels running jobs without reporting an outcome: like a
  crash, the next start's recovery moves their devices to error.
"""
import concurrent.futures
import logging
import threading
import time

import futurist

from steward.common import context
from steward.common import exception
from steward.drivers import cleanup_job

LOG = logging.getLogger(__name__)

MAX_WORKERS = 8
# How often a supervisor reads [nvme] cleanup_timeout again.
RECHECK_SECONDS = 1.0


class CleanupExecutor:
    def __init__(self, conductor, drivers, host, timeout, max_workers=MAX_WORKERS):
        self.conductor = conductor
        self.drivers = list(drivers)
        self.host = host
        self.timeout = timeout              # callable -> seconds ([nvme] cleanup_timeout)
        self._pool = futurist.ThreadPoolExecutor(max_workers=max_workers)
        self._locks = {}
        self._locks_guard = threading.Lock()
        self._jobs = set()
        self._threads = set()
        self._stopping = threading.Event()

    # -- public --------------------------------------------------------------------
    def submit(self, device, trigger='unbind', ctx=None):
        """Clean ``device`` (a device dict with at least ``uuid``) in the background.
        ``ctx``: the context of whoever asked (default: the calling thread's current
        one, for a cast the RPC message's): its request id names every log line and
        conductor call of the cleanup. Returns the supervisor thread (tests join it)."""
        ctx = ctx or context.oslo_context.get_current()
        if self._stopping.is_set():
            LOG.warning('Agent stopping: cleanup of %s not started', device['uuid'])
            return None
        thread = threading.Thread(
            target=self._supervise,
            args=(device['uuid'], trigger, getattr(ctx, 'request_id', None)),
            name=f'cleanup-{device["uuid"][:8]}', daemon=True)
        with self._locks_guard:
            self._threads.add(thread)
        thread.start()
        return thread

    def wait(self, timeout=None):
        """Wait for every cleanup submitted so far (tests, shutdown)."""
        with self._locks_guard:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)

    def stop(self):
        self._stopping.set()
        with self._locks_guard:
            jobs = list(self._jobs)
        for job in jobs:
            job.cancel('agent stopping')
        self._pool.shutdown(wait=False)

    def driver_for(self, device):
        name = device.get('driver_name')
        for driver in self.drivers:
            if name and driver.name == name:
                return driver
        raise exception.CleanupUnsupported(
            device=device['uuid'], reason=f'no enabled driver named {name!r} on '
                                          f'{self.host} can clean it')

    # -- internals -----------------------------------------------------------------
    def _lock(self, uuid):
        with self._locks_guard:
            return self._locks.setdefault(uuid, threading.Lock())

    def _supervise(self, device_uuid, trigger, request_id=None):
        ctx = context.get_admin_context(request_id=request_id)
        ctx.update_store()
        started = threading.Event()
        state = {}
        try:
            future = self._pool.submit(self._work, ctx, device_uuid, trigger, started, state)
        except RuntimeError:            # pool shut down under us
            return self._forget()
        try:
            while not started.wait(0.2):
                if future.done():
                    break
            try:
                result = self._result_by_deadline(future, state)
            except (concurrent.futures.TimeoutError, futurist.CancelledError) as err:
                timeout = state.get('timeout')
                job = state.get('job')
                if isinstance(err, futurist.CancelledError) or job is None:
                    return
                job.cancel(f'cleanup_timeout of {timeout} s reached')
                last = f'last step {job.phase}' + (
                    f' {job.percent:g} %' if job.percent is not None else '') + (
                    f' ({job.detail})' if job.detail else '')
                exc = exception.DeadlineExceeded(device=device_uuid, timeout=timeout,
                                                      reason=last)
                LOG.warning('device %s: %s', device_uuid, exc)
                self._finish(ctx, state, False, job.record, exc)
                return
            except exception.Interrupted as exc:
                if self._stopping.is_set():
                    LOG.warning('device %s: cleanup abandoned, agent stopping',
                                device_uuid)
                    return
                self._finish(ctx, state, False, state['job'].record, exc)
                return
            except exception.StewardError as exc:
                if 'job' not in state:
                    raise
                LOG.error('device %s: cleanup failed: %s (%s)', device_uuid, exc, exc.code)
                self._finish(ctx, state, False, state['job'].record, exc)
                return
            except Exception as exc:  # noqa: BLE001 - any failure must reach error
                if 'job' not in state:
                    raise
                LOG.exception('device %s: cleanup crashed', device_uuid)
                wrapped = exception.CleanupFailed(device=device_uuid,
                                                       reason=f'{type(exc).__name__}: {exc}')
                self._finish(ctx, state, False, state['job'].record, wrapped)
                return
            if result is not None:
                self._finish(ctx, state, True, result, None)
        except Exception:  # noqa: BLE001 - a supervisor must never die silently
            LOG.exception('device %s: cleanup supervision failed', device_uuid)
        finally:
            self._forget()

    def _result_by_deadline(self, future, state):
        """future.result() by [nvme] cleanup_timeout from now, the option read again
        every RECHECK_SECONDS: a reload that raises it saves a long zeroing from
        error, one that lowers it ends a hung cleanup, for the cleanups running too.
        Raises concurrent.futures.TimeoutError past the deadline, the timeout that
        struck in ``state['timeout']``."""
        began = time.monotonic()
        while True:
            state['timeout'] = timeout = self.timeout()
            left = began + timeout - time.monotonic()
            try:
                return future.result(timeout=max(0.0, min(left, RECHECK_SECONDS)))
            except concurrent.futures.TimeoutError:
                if left <= RECHECK_SECONDS:
                    raise

    def _forget(self):
        with self._locks_guard:
            self._threads.discard(threading.current_thread())

    def _work(self, ctx, device_uuid, trigger, started, state):
        """In the pool: take the device lock, move it to cleaning, run the driver.
        Returns the erase record, or None when there was nothing to do."""
        ctx.update_store()      # a pooled thread: log lines name this request
        with self._lock(device_uuid):
            if self._stopping.is_set():
                return None
            try:
                begun = self.conductor.device_cleanup_start(ctx, device_uuid, self.host,
                                                            trigger)
            except (exception.InvalidStateTransition, exception.ConcurrentUpdate,
                    exception.DeviceNotFound) as err:
                LOG.info('device %s: no cleanup to run (%s)', device_uuid, err)
                return None
            device, record_uuid = begun['device'], begun['erase_record']
            job = cleanup_job.CleanupJob(
                device_uuid, on_progress=lambda phase, pct, detail: self._progress(
                    ctx, record_uuid, phase, pct, detail))
            state.update(job=job, record_uuid=record_uuid, device=device)
            with self._locks_guard:
                self._jobs.add(job)
            started.set()
            try:
                driver = self.driver_for(device)
                LOG.info('device %s: cleaning with %s (%s)', device_uuid, driver.name,
                         trigger)
                driver.cleanup(device, job=job)
                job.check()
                return job.record
            finally:
                with self._locks_guard:
                    self._jobs.discard(job)

    def _progress(self, ctx, record_uuid, phase, percent, detail):
        try:
            self.conductor.device_cleanup_progress(ctx, record_uuid, phase, percent, detail)
        except Exception as err:  # noqa: BLE001 - progress is best effort
            LOG.debug('progress update failed: %s', err)

    def _finish(self, ctx, state, succeeded, record, exc):
        result = self.conductor.device_cleanup_finish(
            ctx, state['job'].device_uuid, state['record_uuid'], succeeded, record,
            error_code=None if exc is None else exc.code,
            error_message=None if exc is None else str(exc))
        LOG.info('device %s: cleanup %s -> %s', state['job'].device_uuid,
                 'succeeded' if succeeded else f'failed ({exc.code})',
                 result.get('device_state'))
        return result


def recover(conductor, drivers, host, executor, agent_version):
    """Crash recovery at agent start (spec 1, "Timeout and Crash Recovery"): a
    cleanup that was running -> error; one that was asked for but never started,
    and a release whose cleanup was missed -> cleaned now."""
    ctx = context.get_admin_context()
    info = conductor.device_recovery_info(ctx, host, agent_version)
    by_name = {d.name: d for d in drivers}
    for device in info['interrupted']:
        driver = by_name.get(device.get('driver_name'))
        what = driver.describe_interrupted(device) if driver is not None and \
            hasattr(driver, 'describe_interrupted') else 'no driver to ask'
        LOG.error('device %s was %s when the agent stopped: %s; moving it to error '
                  '(re-clean with POST /v2/devices/%s/clean)', device['uuid'],
                  device['device_state'], what, device['uuid'])
        conductor.device_fail_interrupted(ctx, device['uuid'], what)
    for device in info.get('lost', ()):
        # Asked for, never started (the request was lost): nothing was erased or
        # interrupted, so clean it now rather than send it to error.
        LOG.warning('device %s has been pending_cleaning without its cleanup starting: '
                    'the request to clean it was lost; cleaning it now', device['uuid'])
        executor.submit(device, trigger='recovery', ctx=ctx)
    for device in info['missed']:
        LOG.warning('device %s is allocated with no active ARQ: a cleanup was missed; '
                    'cleaning it now', device['uuid'])
        try:
            device = conductor.device_recover_missed_cleanup(ctx, device['uuid'])
        except exception.StewardError as err:
            LOG.warning('device %s: %s', device['uuid'], err)
            continue
        executor.submit(device, trigger='recovery', ctx=ctx)
    for mm in info['mismatches']:
        LOG.warning('Placement reserved=%s on %s (%s) disagrees with device %s in %s '
                    '(expected %s): a bind or cleanup path defect; check and correct',
                    mm['reserved'], mm['rp_uuid'], mm['resource_class'],
                    mm['device_uuid'], mm['device_state'], mm['expected'])
    return info

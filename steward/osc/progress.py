"""Waiting for server-side work: poll, show phase / percent / elapsed, stop on
Ctrl-C without touching the work itself.

Usage (``openstack accelerator device clean --wait``, steward/osc/v2/device.py)::

    obj = progress.wait_for(
        get=lambda: client.get(f'/devices/{uuid}'),
        done=lambda dev: dev['state'] != 'cleaning',
        describe=lambda dev: progress.Progress(dev['phase'], dev.get('percent')),
        what=f'the cleaning of device {uuid}',
        resume=f'openstack accelerator device erase record list {uuid} --limit 1',
        timeout=args.wait_timeout)

``wait_for`` returns the object for which ``done`` was true; the caller decides
whether that is a success. Ctrl-C raises WaitInterrupted (exit 130) and a
``timeout`` raises WaitTimedOut (exit 6); both print ``resume``, the command
that watches again.

Ctrl-C ends the wait at any moment: the polling runs in a thread of its own and
the main thread only waits for it or for SIGINT (``_interruptible``). A
KeyboardInterrupt raised wherever the polling happens to be was lost now and
then (issue 37): when it lands while the garbage collector finalizes one of
urllib3's responses, CPython's io finalizer clears it without a word (it
evaluates the response's ``closed`` property, Python code, and drops any error)
and the client kept polling a cleanup that hangs by design. The CLI never asks the server to stop anything here: the
work the server accepted goes on. While the API cannot be reached (a restart)
the wait goes on and says so.

Progress goes to stderr: on a terminal a live line (spinner, phase, bar,
percent, elapsed), elsewhere one line per change, so stdout keeps only the
result (``-f json``).
"""
import os
import select
import signal
import sys
import threading
import time
from typing import NamedTuple

import tenacity

from steward.osc import cli

DEFAULT_INTERVAL = 2.0
# Answers that mean "not now" (the API restarting behind a proxy), not "no".
_TRANSIENT_STATUS = (502, 503, 504)


class Progress(NamedTuple):
    phase: str
    percent: float | None = None
    detail: str = ''


class WaitInterrupted(cli.CliError):
    exit_code = cli.EXIT_INTERRUPTED
    label = 'stopped waiting'


class _Cancelled(Exception):
    """The polling thread's end once the wait was interrupted."""


class WaitTimedOut(cli.CliError):
    exit_code = cli.EXIT_TIMEOUT
    label = 'stopped waiting'


def add_arguments(parser, what):
    parser.add_argument('--wait', action='store_true',
                        help=f'wait until {what}, showing progress; Ctrl-C stops '
                             f'waiting, not the work')
    parser.add_argument('--wait-timeout', type=float, metavar='SECONDS',
                        help='with --wait: give up waiting after this long (exit 6)')


def elapsed_text(seconds):
    seconds = int(seconds)
    return f'{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}'


def _transient(err):
    return err.exit_code == cli.EXIT_UNREACHABLE or err.status in _TRANSIENT_STATUS


def wait_for(get, done, describe, *, what, resume, interval=DEFAULT_INTERVAL,
             timeout=None, out=None, clock=time.monotonic, sleep=None):
    """Call ``get()`` every ``interval`` seconds until ``done(obj)``; return obj.

    ``describe(obj)`` gives the Progress to show. ``get`` raising a CliError
    stops the wait with it, except for connection errors and 502/503/504,
    which are shown and retried.
    """
    out = sys.stderr if out is None else out
    started = clock()
    view = _Closable(_LiveView(out) if _is_terminal(out) else _LineView(out))
    shown = [Progress('waiting')]
    not_yet = object()
    # Set once Ctrl-C ended the wait: the polling thread makes no request after
    # it (it may still be inside one, which ends with the process).
    cancelled = threading.Event()
    if sleep is None:
        sleep = cancelled.wait

    def poll():
        if cancelled.is_set():
            raise _Cancelled()
        try:
            obj = get()
        except cli.CliError as err:
            if not _transient(err):
                raise
            shown[0] = shown[0]._replace(detail=f'retrying: {err.message}')
            view.show(shown[0], clock() - started)
            return not_yet
        shown[0] = describe(obj)
        view.show(shown[0], clock() - started)
        return obj if done(obj) else not_yet

    def timed_out(_state):
        return timeout is not None and clock() - started >= timeout

    def pause(_state):
        spent = clock() - started
        return max(interval if timeout is None else min(interval, timeout - spent), 0)

    def give_up(_state):
        raise WaitTimedOut(
            f'gave up after {elapsed_text(clock() - started)} (--wait-timeout); {what} '
            f'goes on on the server. Watch it again with: {resume}')

    # A poll that is not done yet is tried again; any other error ends the wait.
    polling = tenacity.Retrying(retry=tenacity.retry_if_result(lambda r: r is not_yet),
                                stop=timed_out, wait=pause, sleep=sleep,
                                retry_error_callback=give_up)
    def follow():
        with view:
            return polling(poll)

    try:
        return _interruptible(follow)
    except KeyboardInterrupt:
        cancelled.set()
        view.close()       # nothing drawn after the message; the cursor back
        raise WaitInterrupted(
            f'after {elapsed_text(clock() - started)} at {shown[0].phase!r} (Ctrl-C); '
            f'{what} goes on on the server. Watch it again with: {resume}') from None


def _interruptible(fn):
    """``fn()``, run in a daemon thread while this one waits for it to end or for
    SIGINT: KeyboardInterrupt is raised here, on SIGINT, and nowhere in ``fn``.

    SIGINT is noted by ``signal.set_wakeup_fd`` (written by the C handler, at
    delivery) and its Python handler does nothing, so no exception is injected
    into whatever Python code runs at that moment. A thread left inside an HTTP
    request when the wait ends dies with the process. Outside the main thread,
    or with SIGINT ignored, ``fn`` runs here as it is.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        return fn()
    outcome = {}
    done_r, done_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)

    def work():
        try:
            outcome['value'] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            outcome['error'] = err
        finally:
            # The worker owns done_w: closed here, never reused under it.
            try:
                os.write(done_w, b'.')
            except OSError:
                pass          # the wait ended first and closed its end
            os.close(done_w)

    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: None)
    previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        threading.Thread(target=work, name='steward-wait', daemon=True).start()
        while True:
            ready = select.select([done_r, wake_r], [], [])[0]
            if wake_r in ready and signal.SIGINT in os.read(wake_r, 512):
                raise KeyboardInterrupt
            if done_r in ready:
                break
    finally:
        # A SIGINT delivered to another thread is only noted (the wakeup byte)
        # until the main thread runs its Python handler, at some later bytecode:
        # after the restore below that would be the previous handler, a
        # KeyboardInterrupt at a random point. pthread_sigmask runs the pending
        # handlers (the no-op) before it returns; the mask stays as it was.
        signal.pthread_sigmask(signal.SIG_BLOCK, [])
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous_handler)
        for fd in (done_r, wake_r, wake_w):
            os.close(fd)
    if 'error' in outcome:
        raise outcome['error']
    return outcome['value']


class _Closable:
    """A view that draws nothing once closed: the polling thread may still be
    running when the interrupted wait prints its last line."""

    def __init__(self, view):
        self.view, self.closed, self.lock = view, False, threading.Lock()

    def __enter__(self):
        with self.lock:
            if not self.closed:
                self.view.__enter__()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        with self.lock:
            if not self.closed:
                self.closed = True
                self.view.__exit__(None, None, None)

    def show(self, progress, elapsed):
        with self.lock:
            if not self.closed:
                self.view.show(progress, elapsed)


def _is_terminal(out):
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _percent_text(percent):
    return '' if percent is None else f'{percent:.0f}%'


class _LineView:
    """Not a terminal: a line per change of phase, detail or whole percent."""

    def __init__(self, out):
        self.out, self.shown = out, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def show(self, progress, elapsed):
        key = (progress.phase, progress.detail,
               None if progress.percent is None else int(progress.percent))
        if key == self.shown:
            return
        self.shown = key
        parts = [f'[{elapsed_text(elapsed)}]', progress.phase,
                 _percent_text(progress.percent), progress.detail]
        self.out.write(' '.join(p for p in parts if p) + '\n')
        self.out.flush()


class _LiveView:
    """A terminal: one live line, redrawn by rich."""

    def __init__(self, out):
        from rich.console import Console
        from rich import progress as rp
        columns = (rp.SpinnerColumn(),
                   rp.TextColumn('{task.fields[phase]}', markup=False),
                   rp.BarColumn(),
                   rp.TextColumn('{task.fields[pct]}', markup=False),
                   rp.TextColumn('elapsed'), rp.TimeElapsedColumn(),
                   rp.TextColumn('{task.fields[detail]}', markup=False))
        self.bar = rp.Progress(*columns, console=Console(file=out),
                               transient=False, auto_refresh=True)
        self.task = None

    def __enter__(self):
        self.bar.start()
        self.task = self.bar.add_task('', total=None, phase='waiting', pct='', detail='')
        return self

    def __exit__(self, *exc):
        self.bar.stop()
        return False

    def show(self, progress, elapsed):
        known = progress.percent is not None
        self.bar.update(self.task, total=100 if known else None,
                        completed=progress.percent if known else 0,
                        phase=progress.phase, pct=_percent_text(progress.percent),
                        detail=progress.detail, refresh=True)   # each poll drawn once

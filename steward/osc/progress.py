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
that watches again. The CLI never asks the server to stop anything here: the
work the server accepted goes on. While the API cannot be reached (a restart)
the wait goes on and says so.

Progress goes to stderr: on a terminal a live line (spinner, phase, bar,
percent, elapsed), elsewhere one line per change, so stdout keeps only the
result (``-f json``).
"""
import sys
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
             timeout=None, out=None, clock=time.monotonic, sleep=time.sleep):
    """Call ``get()`` every ``interval`` seconds until ``done(obj)``; return obj.

    ``describe(obj)`` gives the Progress to show. ``get`` raising a CliError
    stops the wait with it, except for connection errors and 502/503/504,
    which are shown and retried.
    """
    out = sys.stderr if out is None else out
    started = clock()
    view = _LiveView(out) if _is_terminal(out) else _LineView(out)
    shown = [Progress('waiting')]
    not_yet = object()

    def poll():
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
    try:
        with view:
            return polling(poll)
    except KeyboardInterrupt:
        raise WaitInterrupted(
            f'after {elapsed_text(clock() - started)} at {shown[0].phase!r} (Ctrl-C); '
            f'{what} goes on on the server. Watch it again with: {resume}') from None


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

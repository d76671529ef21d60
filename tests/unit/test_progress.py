"""The progress helper of the OpenStackClient plugin's ``--wait``
(steward/osc/progress.py), with a fake getter and a fake clock."""
import io
import re

import pytest

from steward.osc import cli
from steward.osc import progress


# --- the progress helper (fake getter, fake clock) ------------------------------------------
class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def _states(*items):
    """A getter returning ``items`` in turn; an exception item is raised."""
    items = list(items)

    def get():
        item = items.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item
    return get


def _describe(obj):
    return progress.Progress(obj['phase'], obj.get('pct'))


def _wait(get, out, clock, **kw):
    return progress.wait_for(get, lambda o: o['phase'] == 'done', _describe,
                             what='the cleaning of device D', resume='steward watch D',
                             interval=5, out=out, clock=clock, sleep=clock.sleep, **kw)


def test_progress_polls_until_done_and_prints_changes_only():
    clock, out = FakeClock(), io.StringIO()
    get = _states({'phase': 'sanitize', 'pct': 0.0}, {'phase': 'sanitize', 'pct': 0.4},
                  {'phase': 'sanitize', 'pct': 41.7}, {'phase': 'verify'},
                  {'phase': 'done', 'x': 1})
    assert _wait(get, out, clock) == {'phase': 'done', 'x': 1}
    assert clock.sleeps == [5, 5, 5, 5]
    assert out.getvalue().splitlines() == [
        '[0:00:00] sanitize 0%', '[0:00:10] sanitize 42%', '[0:00:15] verify',
        '[0:00:20] done']


def test_progress_ctrl_c_stops_waiting_with_exit_130():
    for where in ('get', 'sleep'):
        clock, out = FakeClock(), io.StringIO()
        if where == 'get':
            get = _states({'phase': 'sanitize', 'pct': 10}, KeyboardInterrupt())
        else:
            get = _states({'phase': 'sanitize', 'pct': 10})
            clock.sleep = lambda s: (_ for _ in ()).throw(KeyboardInterrupt())
        with pytest.raises(progress.WaitInterrupted) as caught:
            _wait(get, out, clock)
        err = caught.value
        assert err.exit_code == cli.EXIT_INTERRUPTED == 130
        assert str(err).endswith("at 'sanitize' (Ctrl-C); the cleaning of device D goes on "
                                 "on the server. Watch it again with: steward watch D")


def test_progress_timeout_is_exit_6():
    clock, out = FakeClock(), io.StringIO()
    get = _states(*[{'phase': 'sanitize', 'pct': p} for p in range(10)])
    with pytest.raises(progress.WaitTimedOut) as caught:
        _wait(get, out, clock, timeout=12)
    assert caught.value.exit_code == cli.EXIT_TIMEOUT
    assert clock.sleeps == [5, 5, 2]
    assert str(caught.value).startswith('gave up after 0:00:12 (--wait-timeout)')


def test_progress_retries_while_the_api_is_away_and_stops_on_real_errors():
    clock, out = FakeClock(), io.StringIO()
    away = cli.CliError('cannot reach http://x/v2: [Errno 111] Connection refused',
                        exit_code=cli.EXIT_UNREACHABLE)
    proxy = cli.CliError('Bad Gateway', status=502)
    get = _states({'phase': 'sanitize', 'pct': 5}, away, proxy, {'phase': 'done'})
    assert _wait(get, out, clock) == {'phase': 'done'}
    lines = out.getvalue().splitlines()
    assert lines[1] == '[0:00:05] sanitize 5% retrying: cannot reach http://x/v2: ' \
                       '[Errno 111] Connection refused'
    assert lines[2] == '[0:00:10] sanitize 5% retrying: Bad Gateway'
    gone = cli.CliError('Device not found', exit_code=cli.EXIT_NOT_FOUND, status=404)
    with pytest.raises(cli.CliError) as caught:
        _wait(_states({'phase': 'sanitize'}, gone), io.StringIO(), FakeClock())
    assert caught.value is gone


def test_progress_on_a_terminal_draws_a_live_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    clock, out = FakeClock(), Terminal()
    get = _states({'phase': 'sanitize', 'pct': 50}, {'phase': 'done', 'pct': 100})
    _wait(get, out, clock)
    drawn = out.getvalue()
    assert '\r' in drawn and '\x1b[' in drawn      # redrawn in place, with colours
    text = re.sub(r'\x1b\[[0-9;?]*[a-zA-Z]', '', drawn)
    assert 'sanitize' in text and '50%' in text
    assert re.search(r'done ━+ 100% elapsed 0:00:0\d', text), text


# --- Ctrl-C lands inside a finalizer (issue 37) ----------------------------------------------
class _Response(io.RawIOBase):
    """What the garbage collector finalizes during a poll: one of urllib3's
    responses is an io object, and io's finalizer evaluates ``closed`` (Python
    code there) and drops any error it raises, a KeyboardInterrupt included."""

    def __init__(self, on_finalize):
        super().__init__()
        self.on_finalize = on_finalize

    @property
    def closed(self):
        self.on_finalize()
        for _ in range(1000):     # bytecode: where a pending Python handler runs
            pass
        return False


@pytest.fixture
def ctrl_c_armed():
    """SIGINT raising KeyboardInterrupt, as in a client started by a terminal
    (tests/fixtures/terminal.py): a test runner started with SIGINT ignored
    (``cmd &`` in a shell without job control) passes the disposition on, and
    the client then rightly ignores it."""
    import signal
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_progress_ctrl_c_inside_a_finalizer_still_ends_the_wait(ctrl_c_armed):
    """The SIGINT arrives while a response is finalized in the middle of a poll,
    the poll after it finds the work done: the wait still ends as interrupted
    (before, the KeyboardInterrupt vanished in the finalizer and the wait went
    on), and no KeyboardInterrupt is left pending for later."""
    import os
    import signal
    polls = []

    def get():
        polls.append(1)
        if len(polls) == 2:
            _Response(lambda: os.kill(os.getpid(), signal.SIGINT))   # dropped: finalized
            return {'phase': 'done'}
        return {'phase': 'sanitize', 'pct': 10}

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(progress.WaitInterrupted) as caught:
        progress.wait_for(get, lambda o: o['phase'] == 'done', _describe, what='w',
                          resume='r', interval=0, out=io.StringIO())
    assert caught.value.exit_code == 130
    for _ in range(100000):      # a KeyboardInterrupt left pending would land here
        pass
    assert signal.getsignal(signal.SIGINT) is before

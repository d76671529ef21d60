"""`steward serve` supervises its embedded Placement: a real kill -9 of the child
is reaped (no zombie) and the child restarted, with one log line and a metric;
a child that cannot be restarted stops serve with a non-zero status."""
import os
import signal
import socket

import httpx
from prometheus_client import parser
import pytest

from steward.placement import handle
from tests.fixtures.stack import children
from tests.fixtures.stack import running_stack
from tests.fixtures.stack import wait_for

pytestmark = pytest.mark.slow
RESTARTED = ('steward_healed_total', (('what', 'placement_restarted'),))


def _placement_child(st):
    """The pid of serve's embedded Placement child (its gunicorn arbiter)."""
    for pid in children(st.proc.pid):
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            if b'steward.placement.embedded' in f.read():
                return pid
    return None


def _answering_pid(st):
    """The pid header of whoever answers GET / on the Placement port, or None."""
    try:
        # Not 2 s: its first call is a single look, and a loaded machine can take
        # longer to answer; a dead child refuses at once whatever the timeout.
        r = httpx.get(st.placement_url + '/', timeout=30)
    except httpx.HTTPError:
        return None
    return r.headers.get(handle.PID_HEADER)


def _state(pid):
    """The process state letter of ``pid`` ('Z': a zombie), None when gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _scrape(st):
    text = httpx.get(st.metrics_url, timeout=60).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in parser.text_string_to_metric_families(text) for s in fam.samples}


def test_a_killed_placement_is_reaped_and_restarted(tmp_path):
    with running_stack() as st:
        old = _placement_child(st)
        assert old is not None and _answering_pid(st) == str(old)
        assert _scrape(st).get(RESTARTED, 0) == 0
        os.kill(old, signal.SIGKILL)
        new = wait_for(lambda: (lambda p: p if p and p != str(old) else None)(
            _answering_pid(st)), 'a new Placement child answering', timeout=120)
        assert int(new) == _placement_child(st)
        assert _state(old) is None, 'the killed child was not reaped'
        assert _scrape(st)[RESTARTED] == 1
        lines = [line for line in st.log().splitlines() if 'restarted as pid' in line]
        assert len(lines) == 1 and f'pid {old}' in lines[0] and new in lines[0], lines
        assert 'Traceback' not in st.log()
        # Serving as before: the stack's devices are in the restarted Placement
        # (the same database) and the API still answers.
        assert httpx.get(st.url + '/v2/deployables', timeout=60).status_code == 200
        assert st.proc.poll() is None


def test_serve_exits_non_zero_when_placement_cannot_be_restarted():
    extra = '[placement]\nembedded_restart_attempts = 2\n'
    with running_stack(extra_conf=extra) as st:
        old = _placement_child(st)
        port = int(st.placement_url.rsplit(':', 1)[1])
        # Frozen, serve cannot restart anything before its port is taken.
        os.kill(st.proc.pid, signal.SIGSTOP)
        taker = socket.socket()
        # As gunicorn binds: connections of the dead child in TIME_WAIT do not
        # count, a listener does.
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            os.kill(old, signal.SIGKILL)

            def take():
                try:
                    taker.bind(('127.0.0.1', port))
                except OSError:     # the dead child's workers still hold it
                    return False
                return True
            wait_for(take, 'the Placement port free to take', timeout=60)
            taker.listen(16)
            os.kill(st.proc.pid, signal.SIGCONT)
            status = wait_for(lambda: st.proc.poll(), 'steward serve to exit',
                              timeout=240)
        finally:
            if st.proc.poll() is None:
                os.kill(st.proc.pid, signal.SIGCONT)
            taker.close()
        assert status == 1, st.log()[-3000:]
        log = st.log()
        assert 'could not be restarted (2 attempts); stopping steward serve' in log
        assert _state(old) is None

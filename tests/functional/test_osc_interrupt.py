"""Ctrl-C on ``openstack accelerator device clean --wait`` at many moments (issue 37,
item 5): inside each HTTP request of a poll, half-way through reading an answer,
between two polls, in the retry after a 503, on a terminal (the live view), and at
arbitrary points of a wait polling flat out. Each time: exit 130 within the hang
bound, the message naming the command that watches again, nothing asked of the
server after the clean (the cleanup goes on), no traceback, nothing swallowed.

The real ``openstack`` command runs against an API double that holds a chosen
request until the test ends: the moment of the SIGINT is a condition the double
or the client's stderr reports (this request arrived, this line was shown), never
a time. tests/functional/test_osc_plugin.py does the same once against the real
stack and a real hung sanitize.
"""
import http.server
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from tests.fixtures.terminal import as_foreground_job
from tests.fixtures.http_double import JsonHandler
from tests.fixtures.stack import ROOT

pytestmark = pytest.mark.slow
OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
DEV = '6f1c2b9e-3d0a-4c8e-9b1f-2a7d5e4c3b10'
RECORD = '0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d'
BOUND = 600     # only turns a hang into a failure


class CleanApi:
    """The part of Steward's API ``device clean --wait`` reads; ``rule(method,
    path, n)`` (n: the how-many-th request of that method and path) says how to
    answer: 'hold' (never, until the test ends), 'half' (the headers and half
    the body, then hold), '503', or None (the answer)."""

    def __init__(self, rule=lambda method, path, n: None):
        self.rule, self.seen, self.cond = rule, [], threading.Condition()
        self.release = threading.Event()
        api = self

        class Handler(JsonHandler):
            def do_GET(self):
                api.handle(self, 'GET')

            def do_POST(self):
                api.handle(self, 'POST')

            def do_DELETE(self):
                api.handle(self, 'DELETE')

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.url = f'http://127.0.0.1:{self.server.server_address[1]}'
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def wait_seen(self, count):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= count, BOUND), self.seen

    def wait_request(self, method, path, n):
        with self.cond:
            assert self.cond.wait_for(
                lambda: self.seen.count((method, path)) >= n, BOUND), self.seen

    def body(self, method, path):
        if path in ('', '/'):
            return 200, {'versions': [self._version()], 'default_version': self._version()}
        if path in ('/v2', '/v2/'):
            return 200, self._version()
        if method == 'POST' and path == f'/v2/devices/{DEV}/clean':
            return 202, None
        if path == f'/v2/devices/{DEV}':
            return 200, {'uuid': DEV, 'device_state': 'cleaning', 'last_error': None}
        if path == f'/v2/devices/{DEV}/erase_records':
            cleaning = ('POST', f'/v2/devices/{DEV}/clean') in self.seen
            return 200, {'erase_records': [{
                'uuid': RECORD, 'status': 'running', 'phase': 'sanitize',
                'progress': 50.0, 'progress_detail': 'sanitizing'}] if cleaning else []}
        return 404, {'error_code': 'cyb.not_found', 'error_message': path}

    def _version(self):
        return {'id': 'v2.0', 'status': 'CURRENT', 'max_version': '2.6',
                'min_version': '2.0', 'links': [{'href': self.url + '/v2/', 'rel': 'self'}]}

    def handle(self, handler, method):
        path = urllib.parse.urlsplit(handler.path).path
        with self.cond:
            self.seen.append((method, path))
            n = self.seen.count((method, path))
            self.cond.notify_all()
        how = self.rule(method, path, n)
        if how == 'hold':
            self.release.wait()
            handler.close_connection = True
            return
        if how == '503':
            return handler._send(503, {'error_code': 'cyb.unavailable',
                                       'error_message': 'restarting'})
        code, body = self.body(method, path)
        if body is None:
            handler.send_response(code)
            handler.send_header('Content-Length', '0')
            handler.end_headers()
            return
        if how == 'half':
            raw = json.dumps(body).encode()
            handler.send_response(code)
            handler.send_header('Content-Type', 'application/json')
            handler.send_header('Content-Length', str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw[:len(raw) // 2])
            handler.wfile.flush()
            self.release.wait()
            handler.close_connection = True
            return
        handler._send(code, body)


def _env(api):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('OS_') and k not in ('LD_PRELOAD', 'NVME_SIM_STATE')}
    env.update(OS_AUTH_TYPE='none', OS_ENDPOINT=api.url + '/v2')
    return env


def _clean_wait(api, interval, terminal=False):
    args = [OPENSTACK, 'accelerator', 'device', 'clean', DEV, '--wait',
            '--interval', str(interval)]
    if not terminal:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env(api), cwd=ROOT,
                                preexec_fn=as_foreground_job), None
    # stderr on a terminal: the live view (rich) draws the wait.
    main, side = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=side, text=True,
                            env={**_env(api), 'TERM': 'xterm', 'COLUMNS': '120'},
                            cwd=ROOT, preexec_fn=as_foreground_job)
    os.close(side)
    return proc, main


class _Stderr:
    """What the client wrote to stderr so far (a pipe, or a terminal's main side)."""

    def __init__(self, proc, fd=None):
        self.proc, self.fd, self.text = proc, fd, ''

    def _fileno(self):
        return self.fd if self.fd is not None else self.proc.stderr.fileno()

    def read_some(self, wait):
        if select.select([self._fileno()], [], [], wait)[0]:
            try:
                chunk = os.read(self._fileno(), 65536)
            except OSError:          # a terminal whose other side closed
                chunk = b''
            self.text += chunk.decode(errors='replace')
            return bool(chunk)
        return True

    def wait_for(self, pattern):
        deadline = time.monotonic() + BOUND
        while not re.search(pattern, self.text, re.MULTILINE):
            assert self.proc.poll() is None, self.text
            assert time.monotonic() < deadline, self.text
            self.read_some(0.2)

    def rest(self):
        deadline = time.monotonic() + BOUND
        while self.read_some(0.2) and time.monotonic() < deadline:
            if self.proc.poll() is not None and not select.select(
                    [self._fileno()], [], [], 0)[0]:
                break
        return self.text


def _interrupt(proc, stderr):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=BOUND)
    finally:
        proc.kill()
    return proc.returncode, proc.stdout.read(), stderr.rest()


def _assert_stopped_waiting(api, code, out, err):
    assert code == 130, (code, out, err)
    assert out == '' and 'Traceback' not in err and 'Exception ignored' not in err, err
    assert re.search(rf"\(Ctrl-C\); the cleanup of device {DEV} goes on on the "
                     rf"server\. Watch it again with: openstack accelerator device "
                     rf"erase record list {DEV} --limit 1", err), err
    # The cleanup goes on: nothing but the one clean was asked of the server.
    assert [m for m in api.seen if m[0] != 'GET'] == [
        ('POST', f'/v2/devices/{DEV}/clean')], api.seen


def _run(rule, interval, moment, terminal=False):
    api = CleanApi(rule)
    try:
        proc, fd = _clean_wait(api, interval, terminal)
        stderr = _Stderr(proc, fd)
        try:
            moment(api, stderr)
            code, out, err = _interrupt(proc, stderr)
        finally:
            proc.kill()
            if fd is not None:
                os.close(fd)
        return api, code, out, err
    finally:
        api.close()


DEVICE, RECORDS = f'/v2/devices/{DEV}', f'/v2/devices/{DEV}/erase_records'


def _held(method, path, n):
    return (lambda m, p, k: 'hold' if (m, p, k) == (method, path, n) else None,
            lambda api, err: api.wait_request(method, path, n))


MOMENTS = {
    # Inside an HTTP request of a poll: the API took it and does not answer.
    'first device read in flight': _held('GET', DEVICE, 1),
    # The erase records were read once before the clean (the newest before it).
    'first erase record read in flight': _held('GET', RECORDS, 2),
    'third poll in flight': _held('GET', DEVICE, 3),
    # Half of an answer read: the client waits inside the body.
    'half an answer read': (
        lambda m, p, k: 'half' if (m, p, k) == ('GET', DEVICE, 2) else None,
        lambda api, err: api.wait_request('GET', DEVICE, 2)),
    # Between two polls: the poll was shown, the next is an hour away.
    'between two polls': (
        lambda m, p, k: None,
        lambda api, err: err.wait_for(r'^\[\d+:\d\d:\d\d\] cleaning: sanitize 50%')),
    # The API restarting (503): the retry was shown, the next try an hour away.
    'retrying after a 503': (
        lambda m, p, k: '503' if (m, p) == ('GET', DEVICE) else None,
        lambda api, err: err.wait_for(r'retrying: restarting')),
}


@pytest.mark.parametrize('moment', sorted(MOMENTS))
def test_ctrl_c_ends_the_wait(moment):
    rule, reached = MOMENTS[moment]
    interval = 3600 if moment in ('between two polls', 'retrying after a 503') else 0.01
    api, code, out, err = _run(rule, interval, reached)
    _assert_stopped_waiting(api, code, out, err)


@pytest.mark.parametrize('polls', [1, 4, 9, 16, 25, 36])
def test_ctrl_c_ends_a_wait_polling_flat_out(polls):
    """No request held: the SIGINT lands wherever the client is once the API has
    seen the clean and ``polls`` polls (two requests each) after it, reading,
    parsing, showing, retrying or collecting garbage."""
    def reached(api, err):
        api.wait_request('POST', f'/v2/devices/{DEV}/clean', 1)
        api.wait_request('GET', DEVICE, polls)
    api, code, out, err = _run(lambda m, p, k: None, 0, reached)
    _assert_stopped_waiting(api, code, out, err)


def test_ctrl_c_on_a_terminal_ends_the_live_view():
    """On a terminal the wait is a live line (rich): Ctrl-C inside a poll's request
    ends it, and the cursor the view hid is shown again."""
    rule, _ = _held('GET', DEVICE, 2)

    def reached(api, err):
        api.wait_request('GET', DEVICE, 2)
        err.wait_for('cleaning: sanitize')
    api, code, out, err = _run(rule, 0.01, reached, terminal=True)
    _assert_stopped_waiting(api, code, out, err.replace('\r\n', '\n'))
    assert err.rfind('\x1b[?25h') > err.rfind('\x1b[?25l') >= 0, repr(err[-400:])

"""Stopping is always clean: `steward serve` stopped over and over, the ways a
service manager, an operator's Ctrl-C and the OOM killer stop it, leaves no process
behind and every port free, so the next start always works.

Each start runs in a session of its own (``start_new_session``): every process it
starts (the embedded Placement child, privsep daemons) is in that session unless it
escapes on purpose, which is what the survivor check would catch too.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.fixtures.stack import free_port

pytestmark = pytest.mark.slow
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')
REPEAT = 2


def _session_members(sid):
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rpartition(')')[2].split()
        except OSError:
            continue            # gone meanwhile
        # After the command: state, ppid, pgrp, session.
        if int(fields[3]) == sid and fields[0] != 'Z':
            found.append(int(entry))
    return found


def _port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            return False
    return True


class Serve:
    def __init__(self, tmp_path):
        self.ports = {'api': free_port(), 'placement': free_port(), 'metrics': free_port()}
        conf = tmp_path / 'steward.conf'
        conf.write_text(
            f'[DEFAULT]\nstate_path = {tmp_path}\nhost = stop-host\n'
            f'[api]\nport = {self.ports["api"]}\n'
            f'metrics_listen = 127.0.0.1:{self.ports["metrics"]}\n'
            f'[placement]\nembedded_port = {self.ports["placement"]}\n')
        self.log_path = tmp_path / 'serve.log'
        with open(self.log_path, 'a') as log:
            self.proc = subprocess.Popen([STEWARD, 'serve', '--config-file', str(conf)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_answering(self, timeout=120):
        url = f'http://127.0.0.1:{self.ports["api"]}/v2'
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, 'steward serve never answered'
            time.sleep(0.1)

    def wait_gone(self, timeout=30):
        """Every process of the session gone, and every port free."""
        deadline = time.monotonic() + timeout
        while True:
            left = _session_members(self.proc.pid)
            busy = [name for name, port in self.ports.items() if not _port_free(port)]
            if not left and not busy:
                return
            if time.monotonic() > deadline:
                for pid in left:
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f'survivors {left} ({self._cmdlines(left)}), busy ports '
                                     f'{busy}:\n{self.log_path.read_text()[-3000:]}')
            time.sleep(0.1)

    @staticmethod
    def _cmdlines(pids):
        out = []
        for pid in pids:
            try:
                with open(f'/proc/{pid}/cmdline', 'rb') as f:
                    out.append(f.read().replace(b'\0', b' ').decode()[:120])
            except OSError:
                pass
        return out


def _group(proc, *signals, gap=0.0):
    for sig in signals:
        os.killpg(proc.pid, sig)
        time.sleep(gap)


# mode -> (how to stop it once it answers, the exit status it must end with)
MODES = {
    # systemd's default KillMode=control-group: SIGTERM to every process at once.
    'group SIGTERM': (lambda p: _group(p, signal.SIGTERM), 0),
    # Ctrl-C in a terminal: SIGINT to the foreground process group.
    'group SIGINT': (lambda p: _group(p, signal.SIGINT), 0),
    # An impatient operator or a second stop request while shutting down.
    'group SIGTERM twice': (lambda p: _group(p, signal.SIGTERM, signal.SIGTERM, gap=0.05), 0),
    'group SIGINT then SIGTERM': (lambda p: _group(p, signal.SIGINT, signal.SIGTERM), 0),
    # The OOM killer or `kill -9` of the parent only: the children must follow it.
    'SIGKILL of the parent': (lambda p: p.kill(), -signal.SIGKILL),
}


@pytest.mark.parametrize('mode', list(MODES))
def test_stopping_serve_leaves_nothing_behind(tmp_path, mode):
    stop, status = MODES[mode]
    for attempt in range(REPEAT):
        run = tmp_path / str(attempt)
        run.mkdir()
        serve = Serve(run)
        try:
            serve.wait_answering()
            stop(serve.proc)
            assert serve.proc.wait(60) == status, serve.log_path.read_text()[-3000:]
            serve.wait_gone()
        finally:
            if serve.proc.poll() is None:
                os.killpg(serve.proc.pid, signal.SIGKILL)
                serve.proc.wait()
        if status == 0:
            assert 'Traceback' not in serve.log_path.read_text(), serve.log_path.read_text()


@pytest.mark.parametrize('delay', [0.3, 1.0, 2.0])
def test_stopping_serve_while_it_starts_leaves_nothing_behind(tmp_path, delay):
    """SIGTERM to the group while Placement, the database and the agent start (the
    service manager gives up on a slow start, or the host shuts down)."""
    serve = Serve(tmp_path)
    try:
        time.sleep(delay)
        _group(serve.proc, signal.SIGTERM)
        serve.proc.wait(60)
        serve.wait_gone()
    finally:
        if serve.proc.poll() is None:
            os.killpg(serve.proc.pid, signal.SIGKILL)
            serve.proc.wait()
    # The next start on the same ports and state works.
    again = Serve.__new__(Serve)
    again.__dict__.update(serve.__dict__)
    conf = tmp_path / 'steward.conf'
    with open(again.log_path, 'a') as log:
        again.proc = subprocess.Popen([STEWARD, 'serve', '--config-file', str(conf)],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
    try:
        again.wait_answering()
        _group(again.proc, signal.SIGTERM)
        assert again.proc.wait(60) == 0
        again.wait_gone()
    finally:
        if again.proc.poll() is None:
            os.killpg(again.proc.pid, signal.SIGKILL)
            again.proc.wait()


@pytest.mark.parametrize('mode', ['group SIGTERM', 'SIGKILL of the parent'])
def test_api_workers_die_with_their_parent(tmp_path, mode):
    """`steward api` with [api] workers = 2: uvicorn's worker processes hold the
    listening socket; killed, the parent must take them along."""
    stop, status = MODES[mode]
    serve = Serve.__new__(Serve)
    serve.ports = {'api': free_port(), 'metrics': free_port()}
    conf = tmp_path / 'api.conf'
    conf.write_text(
        f'[DEFAULT]\nstate_path = {tmp_path}\nhost = stop-api\n'
        # Never reached: the version document needs no conductor.
        f'transport_url = rabbit://steward:x@127.0.0.1:{free_port()}/\n'
        f'[api]\nport = {serve.ports["api"]}\nworkers = 2\n'
        f'metrics_listen = 127.0.0.1:{serve.ports["metrics"]}\n')
    serve.log_path = tmp_path / 'api.log'
    subprocess.run([STEWARD, 'db', 'sync', '--config-file', str(conf)], check=True,
                   capture_output=True)
    with open(serve.log_path, 'a') as log:
        serve.proc = subprocess.Popen([STEWARD, 'api', '--config-file', str(conf)],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
    try:
        serve.wait_answering()
        assert len(_session_members(serve.proc.pid)) >= 3     # parent and 2 workers
        stop(serve.proc)
        assert serve.proc.wait(60) == status, serve.log_path.read_text()[-3000:]
        serve.wait_gone()
    finally:
        if serve.proc.poll() is None:
            os.killpg(serve.proc.pid, signal.SIGKILL)
            serve.proc.wait()

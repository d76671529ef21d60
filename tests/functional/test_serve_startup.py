"""`steward serve` starts quietly: no WARNING line by the time the API answers (the
in-process transport once made kombu warn "No hostname was supplied" eight times),
one INFO line per component, and a clean stop on SIGTERM."""
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.fixtures.stack import free_port

pytestmark = pytest.mark.slow
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')


@pytest.fixture
def serve(tmp_path):
    api_port, placement_port = free_port(), free_port()
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\nhost = quiet-host\n'
                    f'[api]\nport = {api_port}\nmetrics_listen = 127.0.0.1:{free_port()}\n'
                    f'[placement]\nembedded_port = {placement_port}\n')
    log_path = tmp_path / 'serve.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen([STEWARD, 'serve', '--config-file', str(conf)],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f'http://127.0.0.1:{api_port}/v2'
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, 'steward serve never answered on /v2'
            time.sleep(0.2)
        yield proc, log_path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _lines(path):
    return path.read_text().splitlines()


def test_serve_starts_without_warnings_and_stops_on_sigterm(serve):
    proc, log_path = serve
    lines = _lines(log_path)
    assert [line for line in lines if ' WARNING ' in line or 'Traceback' in line] == []
    # One start-up line per component.
    for component in ('Embedded Placement (pid', 'Agent quiet-host reports under',
                      'Conductor periodic tasks every', 'Steward API listening on'):
        assert sum(component in line for line in lines) == 1, (component, lines)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log_path.read_text()
    assert [line for line in _lines(log_path) if 'Traceback' in line] == []

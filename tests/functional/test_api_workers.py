"""`steward api` with [api] workers > 1: gunicorn's worker processes (uvicorn in
each), and their bind observations exported by the parent through
prometheus_client's multiprocess mode.

No conductor is reachable here (a broker port nobody listens on, one attempt):
every bind fails fast with 503, which the bind histogram counts as ``failed`` in
whichever worker served it. The multi-host tests bind for real through API
workers (tests/multihost/test_deployment.py)."""
import os
import signal
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.stack import children, free_port, wait_for

pytestmark = pytest.mark.slow
STEWARD = os.path.join(os.path.dirname(sys.executable), 'steward')
REQUESTS = 12


@pytest.fixture
def api(tmp_path):
    ports = {'api': free_port(), 'metrics': free_port()}
    conf = tmp_path / 'api.conf'
    conf.write_text(
        f'[DEFAULT]\nstate_path = {tmp_path}\nhost = workers-api\n'
        f'transport_url = rabbit://steward:x@127.0.0.1:{free_port()}/\n'
        f'rpc_unavailable_timeout = 0\n'
        f'[api]\nport = {ports["api"]}\nworkers = 2\n'
        f'metrics_listen = 127.0.0.1:{ports["metrics"]}\n')
    subprocess.run([STEWARD, 'db', 'sync', '--config-file', str(conf)], check=True,
                   capture_output=True)
    log_path = tmp_path / 'api.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen([STEWARD, 'api', '--config-file', str(conf)],
                                stdout=log, stderr=subprocess.STDOUT)
    url = f'http://127.0.0.1:{ports["api"]}'

    def answering():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            return httpx.get(url + '/v2', timeout=2).status_code == 200 and \
                len(children(proc.pid)) == 2
        except httpx.HTTPError:
            return False
    try:
        wait_for(answering, 'steward api and its two workers', timeout=60)
        yield proc, url, f'http://127.0.0.1:{ports["metrics"]}/metrics', log_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert 'Traceback' not in log_path.read_text(), log_path.read_text()[-3000:]


def _failed_binds(metrics_url):
    for line in httpx.get(metrics_url, timeout=10).text.splitlines():
        if line.startswith('steward_arq_bind_seconds_count{outcome="failed"}'):
            return float(line.split()[-1])
    return 0.0


def test_the_workers_binds_are_counted_once(api):
    _, url, metrics_url, _ = api
    for _ in range(REQUESTS):
        arq = str(uuid.uuid4())
        # A connection per request: the kernel spreads them over the workers.
        with httpx.Client(base_url=url, timeout=30) as client:
            r = client.patch('/v2/accelerator_requests', json={arq: [
                {'op': 'add', 'path': '/hostname', 'value': 'h'},
                {'op': 'add', 'path': '/device_rp_uuid', 'value': str(uuid.uuid4())},
                {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
        assert r.status_code == 503, r.text
        assert r.json()['error_code'] == 'cyb.service.unavailable', r.text
    assert _failed_binds(metrics_url) == REQUESTS


def test_a_worker_killed_is_replaced_and_its_count_stays(api):
    proc, url, metrics_url, _ = api
    with httpx.Client(base_url=url, timeout=30) as client:
        r = client.patch('/v2/accelerator_requests', json={str(uuid.uuid4()): [
            {'op': 'add', 'path': '/hostname', 'value': 'h'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': str(uuid.uuid4())},
            {'op': 'add', 'path': '/instance_uuid', 'value': str(uuid.uuid4())}]})
    assert r.status_code == 503
    before = children(proc.pid)
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(set(children(proc.pid)) - set(before)) == 2,
             'gunicorn replacing both workers', timeout=60)
    wait_for(lambda: httpx.get(url + '/v2', timeout=2).status_code == 200,
             'the new workers answering', timeout=60)
    assert _failed_binds(metrics_url) == 1

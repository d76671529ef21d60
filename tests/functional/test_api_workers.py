"""`steward api` with [api] workers > 1: gunicorn's worker processes (uvicorn in
each), and their bind observations exported by the parent through
prometheus_client's multiprocess mode.

No conductor is reachable here (a broker port nobody listens on, one attempt):
every bind fails fast with 503, which the bind histogram counts as ``failed`` in
whichever worker served it. The multi-host tests bind for real through API
workers (tests/multihost/test_deployment.py)."""
import os
import signal
import uuid

import httpx
import pytest

from tests.fixtures.stack import api_workers, children, free_port, wait_for

pytestmark = pytest.mark.slow
REQUESTS = 12


@pytest.fixture
def api(tmp_path):
    metrics_port = free_port()
    with api_workers(tmp_path, default_conf='rpc_unavailable_timeout = 0\n',
                     api_conf=f'metrics_listen = 127.0.0.1:{metrics_port}\n') as (
            proc, url, log_path):
        yield proc, url, f'http://127.0.0.1:{metrics_port}/metrics', log_path


def _failed_binds(metrics_url):
    for line in httpx.get(metrics_url, timeout=60).text.splitlines():
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


def _answers(url):
    """One probe of the new workers: a refused, cut or slow request (a worker
    still importing on a loaded machine) is 'not yet', not a failure."""
    try:
        return httpx.get(url, timeout=60).status_code == 200
    except httpx.TransportError:
        return False


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
    wait_for(lambda: _answers(url + '/v2'), 'the new workers answering', timeout=60)
    assert _failed_binds(metrics_url) == 1


def test_the_servers_own_proxy_headers_handling_is_off(api):
    """uvicorn would take a loopback peer's X-Forwarded-Proto by default; steward
    api's workers leave proxy headers to the app ([api] trusted_proxies, unset
    here), so the links stay the request's own."""
    _, url, _, _ = api
    r = httpx.get(f'{url}/v2', headers={'X-Forwarded-Proto': 'https',
                                        'X-Forwarded-For': '203.0.113.9'}, timeout=30)
    assert r.json()['links'][0]['href'] == f'{url}/v2/'

"""The embedded Placement: in-process app/server and the child process."""
import os
import socket

import httpx
import pytest

from steward.common import exception
from steward.placement import app
from steward.placement import handle as embedded
from tests.fixtures.placement_fixture import get_placement


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_in_process_server_on_port_zero():
    server = get_placement()
    assert server.port != 0 and server.url == 'http://127.0.0.1:%d' % server.port
    doc = httpx.get(server.url + '/', trust_env=False).json()
    assert doc['versions'][0]['max_version'] == '1.39'
    # noauth2: no token is 401, the token 'admin' is an admin.
    assert httpx.get(server.url + '/resource_providers', trust_env=False).status_code == 401


def test_build_app_is_once_per_process():
    get_placement()
    url = app.built_url()
    assert app.build_app(url) is app.build_app(url)
    with pytest.raises(exception.InvalidConfiguration, match='once per process'):
        app.build_app('sqlite:////nonexistent/other.sqlite')


def test_subprocess_serves_and_stops(tmp_path):
    port = _free_port()
    db = tmp_path / 'state' / 'placement.sqlite'      # the directory is created
    log = tmp_path / 'placement.log'
    child = embedded.start_subprocess('sqlite:///%s' % db, '127.0.0.1', port,
                                      log_file=str(log))
    try:
        assert child.url == 'http://127.0.0.1:%d' % port
        resp = httpx.get(child.url + '/', trust_env=False)
        assert resp.status_code == 200
        assert resp.json()['versions'][0]['max_version'] == '1.39'
        assert resp.headers[embedded.PID_HEADER] == str(child.pid)
        rps = httpx.get(child.url + '/resource_providers', trust_env=False,
                        headers={'X-Auth-Token': 'admin'})
        assert rps.status_code == 200 and rps.json() == {'resource_providers': []}
        assert db.exists()
        # A second one on the same port is refused, naming the port.
        with pytest.raises(exception.EmbeddedPlacementError, match=str(port)):
            embedded.start_subprocess('sqlite:///%s' % db, '127.0.0.1', port)
    finally:
        rc = child.stop()
    assert rc == 0                      # SIGTERM is a clean exit
    assert _gone(child.pid)
    assert 'Placement listening on' in log.read_text()


def test_subprocess_start_failure_shows_the_log(tmp_path):
    with pytest.raises(exception.EmbeddedPlacementError) as exc:
        embedded.start_subprocess('nosuchdriver://x', '127.0.0.1', _free_port(),
                                  log_file=str(tmp_path / 'placement.log'), timeout=30)
    assert 'exited with status 1' in str(exc.value)
    assert 'nosuchdriver' in str(exc.value)


@pytest.mark.parametrize('first,second', [('SIGTERM', 'SIGTERM'), ('SIGTERM', 'SIGINT'),
                                          ('SIGINT', 'SIGTERM')])
def test_subprocess_dies_whatever_signals_arrive_at_once(tmp_path, first, second):
    """A process group's SIGTERM and the parent-death SIGTERM land together: the
    child still exits and frees its port (it used to deadlock in its handler)."""
    import signal
    import subprocess
    port = _free_port()
    child = embedded.start_subprocess('sqlite:///%s' % (tmp_path / 'p.sqlite'),
                                      '127.0.0.1', port, log_file=str(tmp_path / 'log'))
    with httpx.Client(trust_env=False) as http:      # a request in flight or just done
        assert http.get(child.url + '/').status_code == 200
    for _ in range(200):                             # a burst, as a group stop gives
        for name in (first, second):
            try:
                os.kill(child.pid, getattr(signal, name))
            except ProcessLookupError:
                break
    try:
        child._proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        child._proc.kill()
        raise AssertionError('the embedded Placement survived two signals')
    with socket.socket() as s:                       # the port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))


def test_worker_processes_share_one_database_without_losing_a_write(tmp_path):
    """Four worker processes on one SQLite file: concurrent writers queue across
    processes (one 200, the rest Placement's 409, never a 500 'database is
    locked'), and concurrent allocations never over-commit an inventory."""
    import concurrent.futures
    import uuid
    port = _free_port()
    child = embedded.start_subprocess('sqlite:///%s' % (tmp_path / 'p.sqlite'),
                                      '127.0.0.1', port, log_file=str(tmp_path / 'log'),
                                      workers=4)
    headers = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'}
    try:
        import time
        deadline = time.monotonic() + 20
        while len(open(f'/proc/{child.pid}/task/{child.pid}/children').read().split()) < 4:
            assert time.monotonic() < deadline, 'gunicorn never started 4 workers'
            time.sleep(0.05)
        rp = str(uuid.uuid4())
        with httpx.Client(base_url=child.url, headers=headers, trust_env=False) as c:
            assert c.post('/resource_providers',
                          json={'uuid': rp, 'name': 'shared'}).status_code == 200

        def put_inventory(total):
            # A connection each, so the requests spread over the workers.
            with httpx.Client(base_url=child.url, headers=headers, trust_env=False) as c:
                return c.put(f'/resource_providers/{rp}/inventories', json={
                    'resource_provider_generation': 0,
                    'inventories': {'VCPU': {'total': total}}}).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(put_inventory, [4] * 16))
        assert sorted(codes) == [200] + [409] * 15, codes

        def allocate(_):
            with httpx.Client(base_url=child.url, headers=headers, trust_env=False) as c:
                return c.put(f'/allocations/{uuid.uuid4()}', json={
                    'allocations': {rp: {'resources': {'VCPU': 1}}},
                    'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
                    'consumer_type': 'INSTANCE'}).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(allocate, range(16)))
        assert 500 not in codes and codes.count(204) <= 4, codes
        with httpx.Client(base_url=child.url, headers=headers, trust_env=False) as c:
            used = c.get(f'/resource_providers/{rp}/usages').json()['usages']['VCPU']
        assert used == codes.count(204)
    finally:
        assert child.stop() == 0

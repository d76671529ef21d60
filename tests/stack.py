"""A throw-away single-host stack (`steward serve` as a real subprocess on free
loopback ports) for end-to-end tests and benchmarks."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self, url, placement_url, state_path, log_path, proc, metrics_url=None):
        self.url, self.placement_url = url, placement_url
        self.metrics_url = metrics_url      # [api] metrics_listen's /metrics
        self.state_path, self.log_path, self.proc = state_path, log_path, proc

    def log(self):
        with open(self.log_path) as f:
            return f.read()


def _offered(url, placement_url):
    """Ready means what Nova would need: deployables in Steward and their
    inventory in Placement (the conductor writes Placement after its commit, so the
    API shows a deployable a moment before Placement can allocate it)."""
    deps = httpx.get(f'{url}/v2/deployables', timeout=2).json().get('deployables')
    if not deps:
        return False
    for dep in deps:
        r = httpx.get(f'{placement_url}/resource_providers/{dep["rp_uuid"]}/inventories',
                      timeout=2, headers={'X-Auth-Token': 'admin'})
        if r.status_code != 200 or not r.json()['inventories']:
            return False
    return True


def wait_for(predicate, what, timeout=30):
    """The predicate's first true value; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out waiting for {what}')
        time.sleep(0.02)


def cpu_seconds(pids):
    """utime + stime of the processes ``pids`` (fields 14 and 15 of
    /proc/<pid>/stat); one gone already counts nothing."""
    ticks = 0
    for pid in pids:
        try:
            with open(f'/proc/{pid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf('SC_CLK_TCK')


def children(pid):
    """Pids of the children of ``pid``, whichever of its threads started them
    (none when ``pid`` is gone)."""
    found = []
    try:
        tasks = os.listdir(f'/proc/{pid}/task')
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f'/proc/{pid}/task/{task}/children') as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return found


def stop_child(proc, sig=signal.SIGTERM, timeout=15):
    """Stop a child process with ``sig``, SIGKILL after ``timeout`` seconds;
    returns its exit status (nothing done for one already gone)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextlib.contextmanager
def running_stack(extra_conf='', timeout=60, discovery_interval=3600):
    with tempfile.TemporaryDirectory(prefix='steward-bench-') as tmp:
        api_port, placement_port, metrics_port = free_port(), free_port(), free_port()
        conf = os.path.join(tmp, 'steward.conf')
        with open(conf, 'w') as f:
            f.write(f'[DEFAULT]\nstate_path = {tmp}\nhost = bench-host\n'
                    f'[api]\nport = {api_port}\nmetrics_listen = 127.0.0.1:{metrics_port}\n'
                    f'[placement]\nembedded_port = {placement_port}\n'
                    f'[agent]\ndiscovery_interval = {discovery_interval}\n{extra_conf}')
        log = open(os.path.join(tmp, 'steward.log'), 'w')
        steward = os.path.join(os.path.dirname(sys.executable), 'steward')
        proc = subprocess.Popen([steward, 'serve', '--config-file', conf],
                                stdout=log, stderr=subprocess.STDOUT)
        url = f'http://127.0.0.1:{api_port}'
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError('steward serve exited:\n' + open(log.name).read()[-3000:])
                try:
                    if _offered(url, f'http://127.0.0.1:{placement_port}'):
                        break
                except (httpx.HTTPError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError('stack not ready:\n' + open(log.name).read()[-3000:])
                time.sleep(0.2)
            yield Stack(url, f'http://127.0.0.1:{placement_port}', tmp, log.name, proc,
                        metrics_url=f'http://127.0.0.1:{metrics_port}/metrics')
        finally:
            stop_child(proc)
            log.close()


def bind_instance(url, placement_url, profile, rc, hostname):
    """Nova's part and Cyborg's for one instance: an ARQ of ``profile``, the
    instance's allocation of one ``rc`` on the deployable's provider, the ARQ bound
    to it. Returns the instance uuid once the ARQ is Bound."""
    import uuid
    from tests import placement_fixture
    with httpx.Client(base_url=url, timeout=30) as api, \
            placement_fixture.admin_session(placement_url) as placement:
        [dep] = api.get('/v2/deployables').json()['deployables']
        arq = api.post('/v2/accelerator_requests',
                       json={'device_profile_name': profile}).json()['arqs'][0]['uuid']
        inst = str(uuid.uuid4())
        r = placement.put(f'/allocations/{inst}', json={
            'allocations': {dep['rp_uuid']: {'resources': {rc: 1}}},
            'project_id': 'p', 'user_id': 'u', 'consumer_generation': None,
            'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text
        r = api.patch('/v2/accelerator_requests', json={arq: [
            {'op': 'add', 'path': '/hostname', 'value': hostname},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
        assert r.status_code == 202, r.text
        wait_for(lambda: api.get(f'/v2/accelerator_requests/{arq}').json()['state']
                 == 'Bound', f'ARQ {arq} to bind')
        return inst


def release_instance(url, placement_url, inst):
    """The instance deleted: its allocation, then its ARQs (Nova's order)."""
    from tests import placement_fixture
    with httpx.Client(base_url=url, timeout=30) as api, \
            placement_fixture.admin_session(placement_url) as placement:
        placement.delete(f'/allocations/{inst}')
        r = api.delete(f'/v2/accelerator_requests?instance={inst}')
        assert r.status_code == 204, r.text


@contextlib.contextmanager
def api_workers(tmp_path, default_conf='', api_conf='', extra_conf='', workers=2):
    """`steward api` with ``workers`` gunicorn workers and no conductor (its broker
    is a port nobody listens on), its database synced first. Yields (process, API
    url, log path) once /v2 answers and every worker runs; at the end SIGTERM, exit
    status 0 and no traceback in the log."""
    port = free_port()
    conf = tmp_path / 'api.conf'
    conf.write_text(
        f'[DEFAULT]\nstate_path = {tmp_path}\nhost = api-workers\n'
        f'transport_url = rabbit://steward:x@127.0.0.1:{free_port()}/\n{default_conf}'
        f'[api]\nport = {port}\nworkers = {workers}\n{api_conf}{extra_conf}')
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')
    subprocess.run([steward, 'db', 'sync', '--config-file', str(conf)], check=True,
                   capture_output=True)
    log_path = tmp_path / 'api.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen([steward, 'api', '--config-file', str(conf)],
                                stdout=log, stderr=subprocess.STDOUT)
    url = f'http://127.0.0.1:{port}'

    def answering():
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            # One worker: uvicorn in the steward api process itself, no child.
            return httpx.get(url + '/v2', timeout=2).status_code == 200 and \
                len(children(proc.pid)) == (workers if workers > 1 else 0)
        except httpx.HTTPError:
            return False
    try:
        wait_for(answering, f'steward api and its {workers} workers', timeout=60)
        yield proc, url, log_path
    finally:
        assert stop_child(proc, timeout=30) == 0
    assert 'Traceback' not in log_path.read_text(), log_path.read_text()[-3000:]

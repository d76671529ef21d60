"""A throw-away single-host stack (`steward serve` as a real subprocess on free
loopback ports) for end-to-end tests and benchmarks."""
import contextlib
import os
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
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()

"""``steward serve`` behind a real Keystone (tests/keystone_fixture.py): the
deployment an OpenStack cloud runs, ``[api] auth_strategy = keystone`` with
``[keystone_authtoken]`` pointing at Keystone, Steward's service user with the
``service`` role, and the API in Keystone's catalog as service type
``accelerator`` (so catalog-based clients, tempest among them, find it).
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from tests.stack import free_port, stop_child

SERVICE_USER, SERVICE_PASSWORD = 'steward', 'steward-service-secret'

_lock = threading.Lock()
_stack = None


class KeystoneStack:
    def __init__(self, keystone, url, proc, log_path, tmp):
        self.keystone, self.url, self.proc, self.log_path = keystone, url, proc, log_path
        self.tmp = tmp

    def log(self):
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def stop(self):
        stop_child(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _conf(tmp, keystone, api_port, placement_port, metrics_port):
    return f"""[DEFAULT]
state_path = {tmp}
host = keystone-stack-host
[api]
port = {api_port}
metrics_listen = 127.0.0.1:{metrics_port}
auth_strategy = keystone
[placement]
embedded_port = {placement_port}
[agent]
discovery_interval = 3600
[keystone_authtoken]
www_authenticate_uri = {keystone.url}
auth_url = {keystone.url}
auth_type = password
username = {SERVICE_USER}
password = {SERVICE_PASSWORD}
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
"""


def start(keystone, timeout=90):
    """A new ``steward serve`` (fake driver: one FPGA device) behind ``keystone``,
    in Keystone's catalog; callers usually want ``shared()``."""
    keystone.user(SERVICE_USER, SERVICE_PASSWORD, project='service', roles=['service'])
    tmp = tempfile.mkdtemp(prefix='steward-ks-stack-')
    api_port, placement_port = free_port(), free_port()
    url = f'http://127.0.0.1:{api_port}'
    # Upstream's catalog entry is the versioned URL (devstack: .../accelerator/v2).
    keystone.register_service('accelerator', 'steward', url + '/v2')
    conf = os.path.join(tmp, 'steward.conf')
    with open(conf, 'w') as f:
        f.write(_conf(tmp, keystone, api_port, placement_port, free_port()))
    log_path = os.path.join(tmp, 'steward.log')
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')
    with open(log_path, 'w') as log:
        proc = subprocess.Popen([steward, 'serve', '--config-file', conf],
                                stdout=log, stderr=subprocess.STDOUT)
    stack = KeystoneStack(keystone, url, proc, log_path, tmp)
    try:
        token = keystone.admin().get_token()
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError('steward serve exited:\n' + stack.log()[-3000:])
            try:
                r = httpx.get(url + '/v2/devices', headers={'X-Auth-Token': token},
                              timeout=5)
                if r.status_code == 200 and r.json()['devices']:
                    return stack
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError('steward serve not ready:\n' + stack.log()[-3000:])
            time.sleep(0.3)
    except BaseException:
        stack.stop()
        raise


def shared(keystone):
    """The per-process stack behind ``keystone``, started on first use: the test
    modules that need one share it (one ``steward serve``, one catalog entry),
    whatever order pytest-xdist runs their tests in."""
    global _stack
    with _lock:
        if _stack is None or _stack.proc.poll() is not None or \
                _stack.keystone is not keystone:
            _stack = start(keystone)
            atexit.register(_stack.stop)
        return _stack

"""A real Keystone 30 for the tests: SQLite, fernet tokens, ``keystone-manage
bootstrap``, served by uWSGI on a free loopback port, one per pytest process.

Keystone lives in its own venv (tests/side_venv.py ``keystone``: it pins its own
oslo.* versions). gunicorn cannot serve it (Keystone's oslo.config parses
``sys.argv`` and every worker dies on gunicorn's arguments); uWSGI can, with
``Connection: close`` on every answer: keystoneauth would otherwise reuse a
connection uWSGI has closed and get ``Connection reset by peer``.

``get_keystone()`` returns the running server (or raises ``Unavailable`` when the
venv cannot be built); ``Keystone.admin()`` is a keystoneauth session of the
bootstrap admin for provisioning through the REST API.
"""
import atexit
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import httpx

from tests import side_venv
from tests.stack import free_port, stop_child

ADMIN_PASSWORD = 'keystone-admin-secret'
REGION = 'RegionOne'

_lock = threading.Lock()
_server = None


class Unavailable(RuntimeError):
    pass


class Keystone:
    def __init__(self, base, port, proc, log_path):
        self.base, self.port, self.proc, self.log_path = base, port, proc, log_path
        self.url = f'http://127.0.0.1:{port}/v3'

    def log(self):
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def session(self, username, password, project_name=None, system_scope=None,
                domain='Default'):
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3
        scope = {'system_scope': system_scope} if system_scope else {
            'project_name': project_name, 'project_domain_name': domain}
        auth = v3.Password(auth_url=self.url, username=username, password=password,
                           user_domain_name=domain, **scope)
        return ks_session.Session(auth=auth)

    def admin(self):
        return self.session('admin', ADMIN_PASSWORD, project_name='admin')

    def token(self, username, password, project_name=None, system_scope=None):
        return self.session(username, password, project_name,
                            system_scope).get_token()

    # -- provisioning (REST, as the bootstrap admin) ---------------------------------
    def _call(self, method, path, **kwargs):
        r = self.admin_session.request(self.url + path, method, raise_exc=False,
                                       **kwargs)
        if r.status_code >= 400:
            raise RuntimeError(f'{method} {path}: {r.status_code} {r.text}')
        return r.json() if r.content else None

    @property
    def admin_session(self):
        if getattr(self, '_admin', None) is None:
            self._admin = self.admin()
        return self._admin

    def find(self, kind, name):
        found = self._call('GET', f'/{kind}s?name={name}')[f'{kind}s']
        return found[0]['id'] if found else None

    def project(self, name):
        return self.find('project', name) or self._call(
            'POST', '/projects', json={'project': {'name': name,
                                                   'domain_id': 'default'}})['project']['id']

    def user(self, name, password, project=None, roles=()):
        """A user (created if missing) with ``roles`` on ``project``; its id."""
        user_id = self.find('user', name) or self._call(
            'POST', '/users', json={'user': {'name': name, 'password': password,
                                             'domain_id': 'default'}})['user']['id']
        if project is not None:
            project_id = self.project(project)
            for role in roles:
                self._call('PUT', f'/projects/{project_id}/users/{user_id}/roles/'
                                  f'{self.role(role)}')
        return user_id

    def role(self, name):
        return self.find('role', name) or self._call(
            'POST', '/roles', json={'role': {'name': name}})['role']['id']

    def register_service(self, service_type, name, url):
        """The service and its public, internal and admin endpoints in the catalog
        (replacing any endpoint of an earlier registration)."""
        services = self._call('GET', f'/services?type={service_type}')['services']
        if services:
            service_id = services[0]['id']
        else:
            service_id = self._call('POST', '/services', json={'service': {
                'type': service_type, 'name': name, 'enabled': True}})['service']['id']
        for ep in self._call('GET', f'/endpoints?service_id={service_id}')['endpoints']:
            self._call('DELETE', f'/endpoints/{ep["id"]}')
        for interface in ('public', 'internal', 'admin'):
            self._call('POST', '/endpoints', json={'endpoint': {
                'service_id': service_id, 'interface': interface, 'url': url,
                'region_id': REGION, 'enabled': True}})

    def stop(self):
        # uWSGI's master stops its workers on SIGINT (SIGTERM reloads it).
        stop_child(self.proc, signal.SIGINT)
        shutil.rmtree(self.base, ignore_errors=True)


def _conf(base):
    keys = os.path.join(base, 'fernet-keys')
    return f"""[DEFAULT]
log_file = {os.path.join(base, 'keystone.log')}
[database]
connection = sqlite:///{os.path.join(base, 'keystone.db')}
[token]
provider = fernet
[fernet_tokens]
key_repository = {keys}
[fernet_receipts]
key_repository = {keys}
[credential]
key_repository = {os.path.join(base, 'credential-keys')}
[cache]
# Per process: without it every request rebuilds the caller's token from the
# database (~0.3 s a request on a busy 2-core host). Tests create new users and
# projects and never rely on another process seeing a change at once.
enabled = true
backend = dogpile.cache.memory
[identity]
# bcrypt's fewest rounds: tempest's dynamic credentials create and log in dozens
# of users per run, each login a hash (at the default 12 rounds, ~0.3 s of CPU).
password_hash_rounds = 4
"""


def _manage(venv, conf, *args):
    out = subprocess.run([os.path.join(venv, 'bin', 'keystone-manage'), '--config-file',
                          conf, *args], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f'keystone-manage {args[0]} failed:\n{out.stderr[-3000:]}')


def start(processes=2, timeout=120):
    """A new Keystone (callers usually want ``get_keystone()``)."""
    try:
        venv = side_venv.ensure('keystone')
    except side_venv.BuildError as exc:
        raise Unavailable(str(exc))
    base = tempfile.mkdtemp(prefix='steward-keystone-')
    conf = os.path.join(base, 'keystone.conf')
    with open(conf, 'w') as f:
        f.write(_conf(base))
    port = free_port()
    url = f'http://127.0.0.1:{port}/v3'
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    _manage(venv, conf, 'db_sync')
    _manage(venv, conf, 'fernet_setup', '--keystone-user', user, '--keystone-group', group)
    _manage(venv, conf, 'credential_setup', '--keystone-user', user,
            '--keystone-group', group)
    _manage(venv, conf, 'bootstrap', '--bootstrap-password', ADMIN_PASSWORD,
            '--bootstrap-region-id', REGION, '--bootstrap-admin-url', url,
            '--bootstrap-internal-url', url, '--bootstrap-public-url', url)
    log_path = os.path.join(base, 'uwsgi.log')
    env = dict(os.environ, OS_KEYSTONE_CONFIG_FILES=conf)
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(
            [os.path.join(venv, 'bin', 'uwsgi'), '--http-socket', f'127.0.0.1:{port}',
             '--module', 'keystone.wsgi.api:application', '--virtualenv', venv,
             '--processes', str(processes), '--master', '--die-on-term',
             '--add-header', 'Connection: close', '--need-app', '--lazy-apps'],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=base,
            start_new_session=True)
    server = Keystone(base, port, proc, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            text = server.log()
            server.stop()
            raise RuntimeError(f'uwsgi exited ({proc.returncode}):\n{text[-3000:]}')
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            text = server.log()
            server.stop()
            raise RuntimeError(f'Keystone did not answer in {timeout}s:\n{text[-3000:]}')
        time.sleep(0.5)
    return server


def get_keystone():
    """The per-process Keystone, started on first use; raises Unavailable when
    its venv cannot be built (no package index)."""
    global _server
    with _lock:
        if _server is None or _server.proc.poll() is not None:
            _server = start()
            atexit.register(_server.stop)
        return _server

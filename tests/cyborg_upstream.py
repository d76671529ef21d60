"""Upstream OpenStack Cyborg 17.0.0, really run: its side virtualenv, its
configuration, its services (conductor, API under gunicorn, agent with the fake
driver) against a real RabbitMQ and a real Placement. Shared by
bench/upstream_cyborg.py (speed) and the switch-from-Cyborg tests
(tests/functional/test_cyborg_import.py).

The virtualenv ``.venv-cyborg/`` at the repository root (git-ignored) is built on
first use with ``pip install openstack-cyborg==17.0.0 gunicorn`` from the package
index (about a minute); nothing goes into Steward's venv or the system.

Upstream's own tools are used as they are, with two workarounds for upstream
defects: the schema is created with ``cyborg-dbsync create_schema`` on SQLite
(``upgrade`` sends ``ALTER TABLE devices ALTER COLUMN type SET NOT NULL``, which
SQLite rejects); on PostgreSQL both fail (``PostgreSQL Enum type requires a
name``: the models and migration c1b5abada09c leave the ARQ state ENUM unnamed), so
there ``create_schema`` runs with that ENUM named, as an operator would have to; ``cyborg-api``
itself dies at start under the threading backend, so ``cyborg.wsgi.api`` is
served by gunicorn behind upstream's paste pipeline minus keystonemiddleware.
On MySQL/MariaDB, upstream's own backend, ``cyborg-dbsync upgrade`` (every
migration, as a deployment runs them) works unchanged and is what runs.
"""
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import uuid

import httpx

from tests import http_double
from tests import side_venv
from tests.multihost.rabbit import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VENV = side_venv.path('cyborg')
HOST = 'bench-host'   # the hostname bench/arq_lifecycle.py's one_instance binds to
PLACEMENT_HEADERS = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.39'}
# What keystonemiddleware puts in the environ for a Nova call carrying a user token
# and a service token.
IDENTITY = {'X-Roles': 'admin,member,reader', 'X-Project-Id': uuid.uuid4().hex,
            'X-User-Id': uuid.uuid4().hex, 'X-Service-Roles': 'service'}
# One process per core, as cyborg-api's default api_workers.
API_WORKERS = os.cpu_count() or 1
API_THREADS = 4
# Upstream's etc/cyborg/api-paste.ini without its authtoken filter.
PASTE = """[pipeline:main]
pipeline = cors http_proxy_to_wsgi request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory

[filter:cors]
paste.filter_factory = oslo_middleware.cors:filter_factory
oslo_config_project = cyborg

[filter:http_proxy_to_wsgi]
paste.filter_factory = oslo_middleware.http_proxy_to_wsgi:HTTPProxyToWSGI.factory
"""


def ensure_venv():
    """.venv-cyborg, built once (tests/side_venv.py: one builder for every side venv;
    concurrent xdist workers wait for the first one's pip). RuntimeError when pip
    fails."""
    side_venv.ensure('cyborg')


def installed_versions():
    out = subprocess.run([os.path.join(VENV, 'bin', 'python'), '-c',
                          'import importlib.metadata as m; print(" ".join('
                          'f"{d}={m.version(d)}" for d in ("openstack-cyborg", '
                          '"oslo.messaging", "oslo.service", "SQLAlchemy", "eventlet")))'],
                         capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()


# -- a stub Nova: the conductor posts os-server-external-events after every bind -----
class _NovaHandler(http_double.JsonHandler):
    def do_GET(self):   # openstacksdk's version discovery
        base = f'http://{self.headers["Host"]}/v2.1'
        self._send(200, {'version': {'id': 'v2.1', 'status': 'CURRENT', 'version': '2.96',
                                     'min_version': '2.1', 'updated': '2013-07-23T11:33:21Z',
                                     'links': [{'rel': 'self', 'href': base + '/'}]}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))) or b'{}')
        self.server.events += len(body.get('events', []))
        self._send(200, {'events': [dict(e, code=200) for e in body.get('events', [])]})


class _NovaServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    events = 0


def start_nova_stub():
    server = _NovaServer(('127.0.0.1', 0), _NovaHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- Cyborg services --------------------------------------------------------------
def write_config(tmp, rabbit_url, placement_url, nova_url, db_url, host=HOST):
    paste = os.path.join(tmp, 'api-paste.ini')
    with open(paste, 'w') as f:
        f.write(PASTE)
    conf = os.path.join(tmp, 'cyborg.conf')
    with open(conf, 'w') as f:
        f.write(f"""[DEFAULT]
host = {host}
transport_url = {rabbit_url}
debug = False
state_path = {tmp}

[database]
connection = {db_url}

[api]
api_paste_config = {paste}

[agent]
enabled_drivers = fake_driver
resource_provider_name = {host}

[placement]
auth_type = admin_token
token = admin
endpoint = {placement_url}
endpoint_override = {placement_url}

[nova]
auth_type = admin_token
token = admin
endpoint = {nova_url}
endpoint_override = {nova_url}

[oslo_concurrency]
lock_path = {tmp}/locks
""")
    return conf


def write_gunicorn_config(tmp, conf, port, workers=API_WORKERS):
    path = os.path.join(tmp, 'gunicorn.conf.py')
    with open(path, 'w') as f:
        f.write(f"""bind = '127.0.0.1:{port}'
workers = {workers}
worker_class = 'gthread'
threads = {API_THREADS}
wsgi_app = 'cyborg.wsgi.api:application'
loglevel = 'warning'


def post_fork(server, worker):
    # cyborg.wsgi.api parses sys.argv with oslo.config when a worker imports it.
    import sys
    sys.argv[1:] = ['--config-file', {conf!r}]
""")
    return path


class Services:
    def __init__(self, tmp, conf):
        self.tmp, self.conf, self.procs = tmp, conf, {}

    def log(self, name):
        return os.path.join(self.tmp, f'{name}.log')

    def run(self, name, *args):
        cmd = [os.path.join(VENV, 'bin', name), *(args or ('--config-file', self.conf))]
        with open(self.log(name), 'ab') as log:
            # Own session: gunicorn forks its workers, stop() ends the whole group.
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def check(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f'{name} exited with {proc.returncode}:\n'
                                   + self.tail(name))

    def tail(self, name, n=3000):
        try:
            with open(self.log(name), errors='replace') as f:
                return f.read()[-n:]
        except OSError as exc:
            return str(exc)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(what, probe, services, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        services.check()
        try:
            found = probe()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f'timed out waiting for {what}')
        time.sleep(0.5)


def offered_rp(api_url, placement_url):
    """The deployable's provider once Cyborg lists it and Placement can allocate it."""
    r = httpx.get(f'{api_url}/v2/deployables', headers=IDENTITY, timeout=5)
    if r.status_code != 200:
        return None
    for dep in r.json().get('deployables', []):
        rp = dep.get('rp_uuid')
        if rp:
            inv = httpx.get(f'{placement_url}/resource_providers/{rp}/inventories',
                            headers=PLACEMENT_HEADERS, timeout=5)
            if inv.status_code == 200 and inv.json()['inventories']:
                return rp
    return None


# cyborg-dbsync create_schema, with a name for each ENUM the models leave unnamed
# (the ARQ state): PostgreSQL needs one, and upstream's migrations fail there too.
_NAMED_ENUMS_CREATE_SCHEMA = """
import sys
import sqlalchemy as sa
from cyborg.db.sqlalchemy import models
for table in models.Base.metadata.tables.values():
    for column in table.columns:
        if isinstance(column.type, sa.Enum) and not column.type.name:
            column.type.name = f'{table.name}_{column.name}'
from cyborg.cmd import dbsync
sys.argv = ['cyborg-dbsync', '--config-file', sys.argv[1], 'create_schema']
sys.exit(dbsync.main())
"""


def dbsync(conf, db_url):
    """Cyborg's schema at its head, made by Cyborg's own tools: ``upgrade`` (its
    migrations, as a deployment runs them) on MySQL/MariaDB, ``create_schema`` on
    SQLite and PostgreSQL (see the module docstring for why)."""
    step = 'upgrade' if db_url.startswith('mysql') else 'create_schema'
    if step == 'upgrade':
        cmd = [os.path.join(VENV, 'bin', 'cyborg-dbsync'), '--config-file', conf,
               'upgrade']
    elif db_url.startswith('sqlite'):
        cmd = [os.path.join(VENV, 'bin', 'cyborg-dbsync'), '--config-file', conf,
               'create_schema']
    else:
        cmd = [os.path.join(VENV, 'bin', 'python'), '-c', _NAMED_ENUMS_CREATE_SCHEMA,
               conf]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f'cyborg-dbsync {step} failed:\n'
                           + (out.stdout + out.stderr)[-3000:])


class Deployment:
    """Cyborg's conductor, API and agent on one host (``host``), with the fake
    driver, on ``db_url``, against ``placement_url`` (a compute-node provider
    named ``host`` must exist there, as Nova would have made it)."""

    def __init__(self, tmp, rabbit, placement_url, db_url, host=HOST,
                 api_workers=API_WORKERS):
        self.tmp, self.rabbit, self.placement_url = tmp, rabbit, placement_url
        self.db_url, self.host, self.api_workers = db_url, host, api_workers
        self.nova = start_nova_stub()
        self.api_port = free_port()
        self.url = f'http://127.0.0.1:{self.api_port}'
        self.conf = write_config(tmp, rabbit.url(), placement_url,
                                 f'http://127.0.0.1:{self.nova.server_address[1]}/v2.1',
                                 db_url, host=host)
        self.services = Services(tmp, self.conf)
        self.rp_uuid = None

    def start(self, timeout=180):
        """Returns the fake deployable's provider once Placement can allocate it."""
        dbsync(self.conf, self.db_url)
        self.services.run('cyborg-conductor')
        self.services.run('gunicorn', '-c',
                          write_gunicorn_config(self.tmp, self.conf, self.api_port,
                                                self.api_workers))
        # The agent's first report is an RPC call: sent before the conductor's queue
        # exists, it is dropped and the agent waits 60 s for a reply, then 60 s more
        # for its next periodic report.
        wait_for('cyborg-conductor to consume its queue',
                 lambda: self.rabbit.consumers('cyborg-conductor'), self.services)
        self.services.run('cyborg-agent')
        self.rp_uuid = wait_for('the fake deployable in Cyborg and Placement',
                                lambda: offered_rp(self.url, self.placement_url),
                                self.services, timeout=timeout)
        return self.rp_uuid

    def stop(self):
        self.services.stop()
        self.nova.shutdown()

"""Steward's production topology on one machine for bench/production.py: a database
server of either kind, the real Placement on it, and the Steward services (conductor,
API with workers, one agent) as doc/multihost.md deploys them, each its own process
(tests/multihost/cluster.py's Service)."""
import os
import re
import subprocess
import sys
import uuid

import httpx

from bench import load
from tests.fixtures import cyborg_upstream
from tests.fixtures import mariadb_fixture
from tests.fixtures import pg_fixture
from tests.multihost import cluster
from tests.multihost.rabbit import free_port

HOST = cyborg_upstream.HOST          # the hostname load.one_instance binds to
BIN = os.path.dirname(sys.executable)


class Database:
    """A throw-away server: ``create(name)`` gives a database's SQLAlchemy URL,
    ``pid`` the server's main process (its backends are its children)."""

    def __init__(self, kind, server):
        self.kind, self.server = kind, server
        if kind == 'PostgreSQL':
            with open(os.path.join(server.datadir, 'postmaster.pid')) as f:
                self.pid = int(f.readline())
            binary = os.path.join(server.bindir, 'postgres')
        else:
            self.pid = server.proc.pid
            binary = mariadb_fixture._server_binary()
        out = subprocess.run([binary, '--version'], capture_output=True, text=True).stdout
        # "postgres (PostgreSQL) 15.18 (Debian ...)", "mariadbd  Ver 10.11.6-MariaDB-0+deb12u1 ..."
        found = re.search(r'(\d+\.\d+(\.\d+)?)', out)
        self.description = f'{kind} {found.group(1) if found else "?"}'

    def create(self, name, upstream=False):
        """A new database's URL through the driver doc/multihost.md configures
        Steward with (psycopg 3; mysqlclient), or with ``upstream`` the one
        upstream Cyborg is deployed with (psycopg2; PyMySQL, the MySQL driver
        its eventlet services need)."""
        if self.kind == 'PostgreSQL':
            self.server.psql(f'CREATE DATABASE {name}')
            return self.server.url(name, driver='psycopg2' if upstream else 'psycopg')
        return self.server.create_database(name,
                                           driver='pymysql' if upstream else 'mysqldb')

    def stop(self):
        self.server.stop()


def database(kind):
    if kind == 'postgresql':
        server = pg_fixture.get_postgres()
        if server is None:
            sys.exit('PostgreSQL is not installed (tools/system-packages.sh)')
        return Database('PostgreSQL', server)
    server = mariadb_fixture.get_mariadb()
    if server is None:
        sys.exit('MariaDB is not installed (tools/system-packages.sh)')
    return Database('MariaDB', server)


def start_placement(db, tmp):
    """The real Placement (2 workers) on a database of its own, with the host's
    compute-node provider as Nova would have made it."""
    from steward.placement import handle as embedded
    os.makedirs(tmp, exist_ok=True)
    placement = embedded.start_subprocess(
        db.create(f'placement_{uuid.uuid4().hex[:8]}'), '127.0.0.1', free_port(),
        log_file=os.path.join(tmp, 'placement.log'))
    httpx.post(f'{placement.url}/resource_providers',
               headers=cyborg_upstream.PLACEMENT_HEADERS,
               json={'name': HOST, 'uuid': str(uuid.uuid4())}).raise_for_status()
    return placement


class StewardDeployment:
    """``conductors`` x ``steward conductor``, ``steward api`` with ``workers`` and
    one ``steward agent`` (fake driver) on ``HOST``; Placement and Nova (events)
    configured on the conductors and the API, as doc/multihost.md does."""

    def __init__(self, tmp, broker, db, placement_url, nova_url, workers, conductors=1):
        self.tmp, self.broker, self.placement_url = tmp, broker, placement_url
        self.workers = workers
        self.conductor_roles = ['conductor'] + [f'conductor-{n}'
                                                for n in range(2, conductors + 1)]
        os.makedirs(tmp, exist_ok=True)
        self.db_url = db.create(f'steward_{uuid.uuid4().hex[:8]}')
        self.port = free_port()
        self.url = f'http://127.0.0.1:{self.port}'
        admin = {'auth_type': 'admin_token', 'token': 'admin'}
        placement = {**admin, 'endpoint': placement_url, 'endpoint_override': placement_url}
        nova = {**admin, 'endpoint_override': nova_url}
        self.confs = {
            **{role: self.conf(role, database=True, placement={
                **placement, 'create_compute_node': 'false'}, nova=nova)
               for role in self.conductor_roles},
            # Metrics on, as deployed, on a port of its own: the default one may be
            # another stack's on a shared machine. [placement] and [nova] as
            # doc/multihost.md gives an API host: it runs the ARQ operations itself.
            'api': self.conf('api', database=True, api={
                'host_ip': '127.0.0.1', 'port': self.port, 'workers': workers,
                'metrics_listen': f'127.0.0.1:{free_port()}'},
                placement=placement, nova=nova),
            # An agent has no database: the conductor writes for it.
            'agent': self.conf('agent', host=HOST, agent={'enabled_drivers': 'fake'}),
        }
        self.services = {}

    def conf(self, name, host=None, database=False, **sections):
        values = {'DEFAULT': {'host': host or f'bench-{name}',
                              'state_path': os.path.join(self.tmp, name),
                              'transport_url': self.broker.url()}}
        os.makedirs(values['DEFAULT']['state_path'], exist_ok=True)
        if database:
            values['database'] = {'connection': self.db_url}
        values.update(sections)
        path = os.path.join(self.tmp, f'{name}.conf')
        with open(path, 'w') as f:
            f.write(cluster._ini(values))
        return path

    def start(self, timeout=180):
        """The fake device's provider once the API lists it and Placement can
        allocate it."""
        subprocess.run([os.path.join(BIN, 'steward'), 'db', 'sync', '--config-file',
                        self.confs['conductor']], check=True, capture_output=True,
                       timeout=300)
        for role in self.conductor_roles + ['api']:
            self.start_service(role)
        # Conductors on the broker first (doc/multihost.md): the agent's first report
        # published while nobody consumes it waits for the RPC timeout.
        cyborg_upstream.wait_for(
            'steward conductors on the broker',
            lambda: self.broker.consumers('steward-conductor') >= len(self.conductor_roles),
            self, timeout)
        self.start_service('agent')
        return cyborg_upstream.wait_for(
            'the fake device in Steward and Placement',
            lambda: cyborg_upstream.offered_rp(self.url, self.placement_url), self, timeout)

    def start_service(self, role):
        command = 'conductor' if role.startswith('conductor') else role
        self.services[role] = cluster.Service(role, command, self.confs[role],
                                              os.path.join(self.tmp, f'{role}.log')).start()

    def check(self):
        """RuntimeError, with the end of its log, when a service has exited."""
        for role, svc in self.services.items():
            if not svc.alive():
                raise RuntimeError(f'steward {role} exited with {svc.proc.returncode}:\n'
                                   + svc.log()[-3000:])

    def cpu_probes(self):
        probes = {role: (lambda pid=self.services[role].pid: load.tree_cpu(pid))
                  for role in ('api', 'agent')}
        pids = [self.services[role].pid for role in self.conductor_roles]
        probes['conductor' if len(pids) == 1 else f'{len(pids)} conductors'] = \
            lambda: sum(load.tree_cpu(pid) for pid in pids)
        return probes

    def stop(self):
        # Agent, API, conductors: nobody waits on a conductor already gone.
        for role in ['agent', 'api'] + self.conductor_roles:
            if role in self.services:
                self.services[role].stop(timeout=30)

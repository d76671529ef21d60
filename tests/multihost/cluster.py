"""A multi-host Steward deployment on one machine, for the multihost tests.

Started here, each as its own process: a RabbitMQ node (rabbit.py), a database on
the tests' PostgreSQL (tests/fixtures/pg_fixture.py), the real Placement
(steward.placement.embedded), ``steward db sync``, conductors, ``steward api``
with several gunicorn workers, and one ``steward agent`` per host, each with its
own configuration file, ``[DEFAULT] host`` and fake sysfs tree (the fake driver
plus two PCI functions per host). When run as root with ``ip netns`` available,
every agent runs in a network namespace of its own and reaches the broker over a
veth pair, as a compute node reaches its controller; otherwise all processes
share loopback.

Compute-node resource providers are created up front, as Nova would, and the
conductors run with ``[placement] create_compute_node = false``: an agent whose
name has no provider must be refused, not silently given one.
"""
import concurrent.futures
import ctypes
import ipaddress
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import httpx

from steward.placement import handle as embedded
from tests.fixtures import requirements
from tests.multihost import mariadb
from tests.multihost import pg
from tests.multihost import rabbit
from tests.fixtures.sysfs_tree import make_pci

BIN = os.path.dirname(sys.executable)
PCI_VENDOR, PCI_PRODUCT = '10de', '1eb8'
PCI_RC = f'CUSTOM_PCI_{PCI_VENDOR.upper()}_{PCI_PRODUCT.upper()}'
PCI_ADDRESSES = ('0000:81:00.0', '0000:82:00.0')
PLACEMENT_VERSION = 'placement 1.39'
DISCOVERY_INTERVAL = 1
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    libc = ctypes.CDLL('libc.so.6', use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _ini(sections):
    out = []
    for name, values in sections.items():
        out.append(f'[{name}]')
        for key, value in values.items():
            for v in (value if isinstance(value, list) else [value]):
                out.append(f'{key} = {v}')
        out.append('')
    return '\n'.join(out)


class Service:
    """One ``steward <role>`` process."""

    def __init__(self, name, role, conf_path, log_path, netns=None, env=None, bin_dir=BIN):
        self.name, self.role, self.conf_path, self.log_path = name, role, conf_path, \
            log_path
        # Whose ``steward``: this tree's, or a release's (tests/multihost/test_rolling_upgrade.py).
        self.bin_dir = bin_dir
        self.netns = netns
        # Added to the inherited environment (a simulated NVMe's LD_PRELOAD shim).
        self.env = env
        self.proc = None

    def start(self):
        cmd = [os.path.join(self.bin_dir, 'steward'), self.role, '--config-file',
               self.conf_path]
        if self.netns:
            # `ip netns exec` execs the command: the pid stays the service's.
            cmd = ['ip', 'netns', 'exec', self.netns] + cmd
        log = open(self.log_path, 'ab')
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent, env=env)
        log.close()
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self):
        """kill -9 of the service's process group (gunicorn workers included)."""
        return self.stop(sig=signal.SIGKILL)

    def restart(self):
        self.stop()
        return self.start()

    def log(self):
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_since(self, offset):
        with open(self.log_path, errors='replace') as f:
            f.seek(offset)
            return f.read()


class Netns:
    """A network namespace joined to the root namespace by a veth pair, with
    ``outer`` (root side) and ``inner`` addresses of a /30 in 198.18.0.0/15, the
    range set aside for network tests (RFC 2544). Several test processes may run
    clusters at once: each pair takes a /30 no interface uses yet."""

    def __init__(self, name, index, tag='v'):
        self.name = name
        net = ipaddress.ip_network('198.18.0.0/15')
        used = self._used()
        slots = net.num_addresses // 4
        start = (os.getpid() * 8 + index) % slots
        for k in range(slots):
            base = net.network_address + ((start + k) % slots) * 4
            if not {base + 1, base + 2} & used:
                break
        self.outer, self.inner = str(base + 1), str(base + 2)
        # ``tag``: one letter per cluster of the process (a PostgreSQL and a
        # MariaDB deployment live side by side), within IFNAMSIZ's 15 characters.
        self.veth = f'stw{os.getpid() % 100000}{tag}{index}'

    @staticmethod
    def _used():
        out = subprocess.run(['ip', '-o', '-4', 'addr', 'show'], capture_output=True,
                             text=True).stdout
        return {ipaddress.ip_address(w.split('/')[0]) for line in out.splitlines()
                for w in line.split() if w.count('.') == 3 and '/' in w}

    @staticmethod
    def available():
        if os.geteuid() != 0 or not shutil.which('ip') or \
                os.environ.get('STEWARD_MULTIHOST_NETNS', '1') == '0':
            return False
        probe = f'stwprobe{os.getpid()}'
        ok = subprocess.run(['ip', 'netns', 'add', probe], capture_output=True).returncode == 0
        if ok:
            subprocess.run(['ip', 'netns', 'del', probe], capture_output=True)
        return ok

    def create(self):
        def run(*cmd):
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        run('ip', 'netns', 'add', self.name)
        run('ip', 'link', 'add', self.veth, 'type', 'veth', 'peer', 'name', 'eth0',
            'netns', self.name)
        run('ip', 'addr', 'add', f'{self.outer}/30', 'dev', self.veth)
        run('ip', 'link', 'set', self.veth, 'up')
        run('ip', 'netns', 'exec', self.name, 'ip', 'addr', 'add', f'{self.inner}/30',
            'dev', 'eth0')
        run('ip', 'netns', 'exec', self.name, 'ip', 'link', 'set', 'eth0', 'up')
        run('ip', 'netns', 'exec', self.name, 'ip', 'link', 'set', 'lo', 'up')
        return self

    def delete(self):
        subprocess.run(['ip', 'link', 'del', self.veth], capture_output=True)
        subprocess.run(['ip', 'netns', 'del', self.name], capture_output=True)


def require(database='postgresql'):
    """What a deployment on ``database`` needs of this machine: ``need()`` of the
    first missing server (RabbitMQ, then PostgreSQL or MariaDB)."""
    rabbit.require()
    if database == 'mysql':
        from tests.fixtures import mariadb_fixture
        if not mariadb_fixture.installed():
            requirements.need('mariadb', 'MariaDB server binaries are not installed')
    elif pg.server() is None:
        requirements.need('postgres', 'PostgreSQL server binaries are not installed')


class Cluster:
    #: The letter of this deployment's namespaces and veth pairs; None: 'v', or 'm'
    #: on MariaDB. Each kind of deployment that may share a test process with
    #: another (tests/nova/cloud.py's beside tests/multihost's) has its own.
    netns_tag = None

    #: [oslo_messaging_rabbit] rabbit_quorum_queue, as doc/multihost.md sets it:
    #: durable queues that outlive a broker restart (bench/recovery.py
    #: --classic-queues measures the default's 60 s stall beside it).
    quorum_queues = True

    def __init__(self, hosts=('mh-a', 'mh-b', 'mh-c'), conductors=2, api_workers=2,
                 use_netns=None, database='postgresql', bin_dir=BIN, extra_conf=None,
                 pg_driver='psycopg', mysql_driver='mysqldb'):
        self.base = pathlib.Path(tempfile.mkdtemp(prefix='steward-multihost-'))
        # The release the deployment starts with (its ``steward``, db sync included)
        # and sections added to every service's configuration.
        self.bin_dir, self.extra_conf = bin_dir, extra_conf or {}
        self.hosts = list(hosts)
        self.n_conductors = conductors
        self.api_workers = api_workers
        self.use_netns = Netns.available() if use_netns is None else use_netns
        if use_netns is None and not self.use_netns:
            requirements.degraded('netns', 'no network namespaces (needs root and '
                                           '`ip netns`): every process shares loopback')
        self.netns = {}
        self.rabbit = None
        # 'postgresql' (tests/multihost/pg.py) or 'mysql' (.../mariadb.py).
        self.database = database
        # The database's driver in the URL: psycopg (3) and mysqlclient, as
        # doc/multihost.md says; psycopg2 and PyMySQL for a release that has no
        # other (tests/fixtures/previous_release.py).
        self.pg_driver, self.mysql_driver = pg_driver, mysql_driver
        self.pg = None
        self.mariadb = None
        self.db_url = None
        self.placement = None
        self.placement_url = None
        self.api_port = rabbit.free_port()
        self.metrics_port = rabbit.free_port()
        self.api_url = f'http://127.0.0.1:{self.api_port}'
        self.conductors = []
        self.api = None
        self.agents = {}
        self.extra_agents = {}
        self.compute_rps = {}

    # -- the database server ------------------------------------------------------------
    def stop_database(self):
        """A restart's first half: the server shut down, its sessions cut."""
        if self.mariadb is not None:
            mariadb.stop(self.mariadb)
        else:
            pg.stop(self.pg)

    def start_database(self):
        if self.mariadb is not None:
            mariadb.start(self.mariadb)
        else:
            pg.start(self.pg)

    def start_database_server(self):
        """The deployment's database server and a database of its own on it: the
        URL of [database] connection."""
        if self.database == 'mysql':
            self.mariadb = mariadb.server()
            if self.mariadb is None:
                raise RuntimeError('MariaDB is not installed')
            return mariadb.create_database(self.mariadb, driver=self.mysql_driver)[1]
        self.pg = pg.server()
        if self.pg is None:
            raise RuntimeError('PostgreSQL is not installed')
        return pg.create_database(self.pg, driver=self.pg_driver)[1]

    # -- configuration ----------------------------------------------------------------
    def common_conf(self, name, host, broker_host=None):
        state = self.base / name
        state.mkdir(exist_ok=True)
        conf = {
            'DEFAULT': {'host': host, 'state_path': str(state),
                        'transport_url': self.rabbit.url(broker_host)},
            'database': {'connection': self.db_url},
            # Reconnect within a few seconds of a broker restart (default cap: 30 s).
            'oslo_messaging_rabbit': {'rabbit_interval_max': 4,
                                      'rabbit_quorum_queue': self.quorum_queues},
        }
        for section, values in self.extra_conf.items():
            conf.setdefault(section, {}).update(values)
        return conf

    def write_conf(self, name, sections):
        path = self.base / f'{name}.conf'
        path.write_text(_ini(sections))
        return str(path)

    def placement_conf(self):
        return {'auth_type': 'admin_token', 'endpoint': self.placement_url,
                'token': 'admin', 'endpoint_override': self.placement_url}

    def conductor_conf(self, index):
        name = f'conductor-{index}'
        conf = self.common_conf(name, f'mh-ctl-{index}')
        conf['placement'] = {**self.placement_conf(), 'create_compute_node': 'false'}
        return name, self.write_conf(name, conf)

    def api_conf(self):
        """As doc/multihost.md configures an API host: with [placement], so it
        runs the accelerator requests' operations itself."""
        conf = self.common_conf('api', 'mh-ctl-api')
        conf['placement'] = self.placement_conf()
        conf['api'] = {'host_ip': '127.0.0.1', 'port': self.api_port,
                       'workers': self.api_workers,
                       'metrics_listen': f'127.0.0.1:{self.metrics_port}'}
        return self.write_conf('api', conf)

    def sysfs_for(self, host):
        return self.base / f'sysfs-{host}'

    def agent_conf(self, host, rp_name=None, drivers='fake, pci'):
        name = f'agent-{host}'
        root = self.sysfs_for(host)
        if not root.exists():
            for bdf in PCI_ADDRESSES:
                make_pci(root, bdf, f'0x{PCI_VENDOR}', f'0x{PCI_PRODUCT}', cls='0x030200')
        ns = self.netns.get(host)
        conf = self.common_conf(name, host, broker_host=ns.outer if ns else None)
        # An agent has no database: its conductor writes for it.
        del conf['database']
        # A report lost in a broker restart is retried on the next cycle; waiting
        # the default 60 s for its reply only delays that. Only this agent's calls
        # to the conductor wait this long (the API's binds and calls keep their 60 s
        # defaults), and one that expires under load delays, it does not fail: the
        # conductor still runs the delivered call, a report is sent again next
        # cycle, and every test waits on the state that results (wait_for).
        conf['DEFAULT']['rpc_response_timeout'] = 15
        conf['DEFAULT']['sysfs_root'] = str(root)
        conf['agent'] = {'enabled_drivers': drivers,
                         'discovery_interval': DISCOVERY_INTERVAL}
        if rp_name:
            conf['agent']['resource_provider_name'] = rp_name
        conf['pci'] = {'device_spec': json.dumps({'vendor_id': PCI_VENDOR,
                                                  'product_id': PCI_PRODUCT})}
        return name, self.write_conf(name, conf)

    # -- lifecycle --------------------------------------------------------------------
    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        if self.use_netns:
            for i, host in enumerate(self.hosts, 1):
                tag = self.netns_tag or ('m' if self.database == 'mysql' else 'v')
                self.netns[host] = Netns(f'stw{os.getpid()}{tag}-{host}', i, tag).create()
        self.rabbit = rabbit.RabbitServer(
            base=str(self.base / 'rabbit'),
            extra_listeners=[ns.outer for ns in self.netns.values()])
        self.rabbit.start()
        self.db_url = self.start_database_server()
        port = rabbit.free_port()
        self.placement = embedded.start_subprocess(
            f'sqlite:///{self.base}/placement.sqlite', '127.0.0.1', port,
            log_file=str(self.base / 'placement.log'))
        self.placement_url = self.placement.url
        for host in self.hosts:
            self.compute_rps[host] = self.create_compute_node(host)

        sync_conf = self.write_conf('db-sync', self.common_conf('db-sync', 'mh-sync'))
        subprocess.run([os.path.join(self.bin_dir, 'steward'), 'db', 'sync',
                        '--config-file', sync_conf], check=True, capture_output=True,
                       timeout=120)
        for i in range(1, self.n_conductors + 1):
            self.add_conductor(i)
        self.api = Service('api', 'api', self.api_conf(), str(self.base / 'api.log'),
                           bin_dir=self.bin_dir)
        self.api.start()
        # Conductors first, as doc/multihost.md says: a call published while no
        # conductor consumes the topic is lost and its caller waits for the timeout.
        self.wait_for(lambda: self.rabbit.consumers('steward-conductor')
                      == len(self.conductors), 'conductors on the broker', timeout=120)
        for host in self.hosts:
            self.add_agent(host)
        self.wait_ready()

    def add_conductor(self, index):
        name, path = self.conductor_conf(index)
        svc = Service(name, 'conductor', path, str(self.base / f'{name}.log'),
                      bin_dir=self.bin_dir).start()
        self.conductors.append(svc)
        return svc

    def add_agent(self, host, rp_name=None, drivers='fake, pci'):
        name, path = self.agent_conf(host, rp_name=rp_name, drivers=drivers)
        ns = self.netns.get(host)
        svc = Service(name, 'agent', path, str(self.base / f'{name}.log'),
                      netns=ns.name if ns else None, bin_dir=self.bin_dir).start()
        self.agents[host] = svc
        return svc

    def add_nvme_agent(self, host, sim, vendor_id='8086'):
        """An extra agent host whose only driver is nvme, over ``sim`` (a
        tests.nvme_sim.Simulation): the sim's sysfs and dev trees, its nvme-cli and
        its shim in the environment. It gets a compute node but is kept out of
        ``hosts`` and ``agents`` (whose checks expect the fake + PCI devices) and
        runs on loopback; the caller stops it with ``stop_extra_agent``."""
        self.compute_rps[host] = self.create_compute_node(host)
        name = f'agent-{host}'
        conf = self.common_conf(name, host)
        del conf['database']
        # rpc_response_timeout: the default 60 s, not agent_conf's 15 s: this agent
        # cleans, and a device_cleanup_start whose answer a busy conductor sends
        # late would leave the device cleaning with nobody at work. No broker
        # restarts while it runs, so the shorter wait would buy nothing.
        conf['DEFAULT'].update({'sysfs_root': sim.sysfs_root, 'dev_root': sim.dev_root})
        conf['agent'] = {'enabled_drivers': 'nvme',
                         'discovery_interval': DISCOVERY_INTERVAL}
        conf['nvme'] = {'device_spec': json.dumps({'vendor_id': vendor_id}),
                        'nvme_cli': sim.nvme_cli, 'cleanup_timeout': 60}
        svc = Service(name, 'agent', self.write_conf(name, conf),
                      str(self.base / f'{name}.log'), env=dict(sim.env)).start()
        self.extra_agents[host] = svc
        return svc

    def stop_extra_agent(self, host):
        svc = self.extra_agents.pop(host, None)
        if svc is not None:
            svc.stop(timeout=20)

    def wait_ready(self, timeout=120, settle=True):
        deadline = time.monotonic() + timeout
        self.wait_for(lambda: self.rabbit.consumers('steward-conductor')
                      == len(self.conductors), 'conductors on the broker', deadline)
        self.wait_for(self.api_answers, 'the API', deadline)
        for host in self.hosts:
            self.wait_for(lambda h=host: self.host_registered(h),
                          f'agent {host} registered', deadline)
        if settle:
            self.settle()

    def settle(self):
        """Let every conductor see the current report of every host once. Each
        conductor keeps its own digest of each host's last report, so after a
        start or a change of devices the next reports are full ones, one per
        conductor, each writing Placement. Waiting a few discovery cycles lets
        them land before a test compares Placement. (A full report racing a bind
        on another conductor once wrote a stale reservation; the reservation is
        now read when it is written: device_ops.current_reserved.)"""
        time.sleep(DISCOVERY_INTERVAL * 2 * (len(self.conductors) + 1))

    def wait_for(self, predicate, what, deadline=None, timeout=60, interval=0.2):
        deadline = deadline or time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except (httpx.HTTPError, OSError):
                pass
            for svc in self.services():
                if svc.proc is not None and not svc.alive() and svc.role != 'agent':
                    raise RuntimeError(f'{svc.name} exited:\n{svc.log()[-4000:]}')
            if time.monotonic() > deadline:
                raise RuntimeError(f'timed out waiting for {what}\n' + self.logs_tail())
            time.sleep(interval)

    def services(self):
        """Agents first, conductors last: the order to stop them in, so no agent
        or API call waits on a conductor that is already gone."""
        out = list(self.agents.values())
        if self.api:
            out.append(self.api)
        return out + list(self.conductors)

    def stop(self):
        # Every service at once, then what they use: each takes 1.3-2 s to stop
        # (its RPC servers' last poll), 7.3 s in all one group after another.
        services = list(self.agents.values()) + list(self.extra_agents.values()) \
            + ([self.api] if self.api else []) + list(self.conductors)
        _together([lambda svc=svc: svc.stop(timeout=20) for svc in services])
        _together([stop for stop in (self.placement and self.placement.stop,
                                     self.rabbit and self.rabbit.destroy) if stop])
        for ns in self.netns.values():
            ns.delete()
        if self.pg is not None and self.db_url:
            try:
                self.pg.psql(f'DROP DATABASE IF EXISTS {self.db_url.rsplit("/", 1)[1]} '
                             f'WITH (FORCE)')
            except Exception:  # noqa: BLE001
                pass
        if self.mariadb is not None:
            self.mariadb.stop()
        if os.environ.get('STEWARD_MULTIHOST_KEEP'):
            print(f'multihost logs kept in {self.base}')
        else:
            shutil.rmtree(self.base, ignore_errors=True)

    def logs_tail(self, n=2500):
        parts = []
        for svc in self.services():
            try:
                parts.append(f'--- {svc.name} (pid {svc.proc.pid if svc.proc else "-"})\n'
                             + svc.log()[-n:])
            except OSError:
                pass
        return '\n'.join(parts)

    # -- clients ----------------------------------------------------------------------
    def api_client(self, timeout=90):
        return httpx.Client(base_url=self.api_url, timeout=timeout)

    def placement_client(self):
        return httpx.Client(base_url=self.placement_url, timeout=30, headers={
            'X-Auth-Token': 'admin', 'OpenStack-API-Version': PLACEMENT_VERSION})

    def api_answers(self):
        with self.api_client(timeout=5) as api:
            return api.get('/v2').status_code == 200

    def create_compute_node(self, name):
        """The compute-node provider as Nova creates it (a root provider named after
        the host, with Nova's inventory and traits)."""
        rp = str(uuid.uuid4())
        with self.placement_client() as p:
            r = p.post('/resource_providers', json={'name': name, 'uuid': rp})
            r.raise_for_status()
            r = p.put(f'/resource_providers/{rp}/inventories', json={
                'resource_provider_generation': 0,
                'inventories': {'VCPU': {'total': 8}, 'MEMORY_MB': {'total': 16384}}})
            r.raise_for_status()
            gen = r.json()['resource_provider_generation']
            p.put(f'/resource_providers/{rp}/traits', json={
                'resource_provider_generation': gen,
                'traits': ['COMPUTE_ACCELERATORS', 'OWNER_NOVA']}).raise_for_status()
        return rp

    # -- views ------------------------------------------------------------------------
    def deployables(self, host=None):
        with self.api_client() as api:
            deps = api.get('/v2/deployables').json()['deployables']
        # Drivers name deployables <host>_<device>.
        return [d for d in deps if host is None or d['name'].startswith(f'{host}_')]

    def host_registered(self, host):
        """Every device of ``host`` in the database and its providers in Placement."""
        deps = self.deployables(host)
        if len(deps) != 1 + len(PCI_ADDRESSES):
            return False
        with self.placement_client() as p:
            tree = p.get('/resource_providers', params={
                'in_tree': self.compute_rps[host]}).json()['resource_providers']
        return {d['rp_uuid'] for d in deps} <= {rp['uuid'] for rp in tree}

    def pci_rp(self, host, address=PCI_ADDRESSES[0]):
        name = f'{host}_{address}'
        return next(d['rp_uuid'] for d in self.deployables(host) if d['name'] == name)

    def fake_rp(self, host):
        return next(d['rp_uuid'] for d in self.deployables(host)
                    if d['name'] == f'{host}_FakeDevice')

    def placement_tree(self, host):
        """{provider name: (inventories, traits, usages)} under the host's compute
        node: what a boot/delete cycle must leave as it found it (generations move
        with every write and are left out)."""
        out = {}
        with self.placement_client() as p:
            rps = p.get('/resource_providers', params={
                'in_tree': self.compute_rps[host]}).json()['resource_providers']
            for rp in rps:
                u = rp['uuid']
                got = [p.get(f'/resource_providers/{u}/{what}')
                       for what in ('inventories', 'traits', 'usages')]
                if any(r.status_code == 404 for r in got):
                    continue        # deleted while we read the tree
                inv, traits, usages = (r.json()[k] for r, k in zip(
                    got, ('inventories', 'traits', 'usages')))
                out[rp['name']] = (inv, sorted(traits), usages)
        return out

    def db_view(self, host=None):
        """Devices (with device_state), deployables and ARQs as the API shows them,
        minus timestamps: the health reading's time too, which a quiet report
        moves forward every [health] read_at_refresh (300 s) with nothing else
        changed (a boot and delete once straddled it, on a loaded machine)."""
        with self.api_client() as api:
            hdr = {'OpenStack-API-Version': 'accelerator latest'}
            params = {'hostname': host} if host else {}
            devices = api.get('/v2/devices', params=params, headers=hdr).json()['devices']
            arqs = api.get('/v2/accelerator_requests').json()['arqs']
        strip = ('updated_at', 'created_at', 'links')
        view = {}
        for d in devices:
            view[d['uuid']] = {k: v for k, v in d.items() if k not in strip}
            if 'health' in d:
                view[d['uuid']]['health'] = {k: v for k, v in d['health'].items()
                                             if k != 'read_at'}
        return view, sorted(a['uuid'] for a in arqs)

    def broker_connections(self):
        """{pid: connections} of processes connected to the broker (from ss)."""
        out = subprocess.run(['ss', '-Htnp', 'state', 'established', 'dst',
                              f'{self.rabbit.host}:{self.rabbit.port}'],
                             capture_output=True, text=True).stdout
        pids = {}
        for line in out.splitlines():
            for part in line.split('pid=')[1:]:
                pid = int(part.split(',')[0])
                pids[pid] = pids.get(pid, 0) + 1
        return pids

    def api_worker_pids(self):
        out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(self.api.pid)],
                             capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def _together(calls):
    """Run ``calls`` side by side; one that fails does not stop the others."""
    with concurrent.futures.ThreadPoolExecutor(max(len(calls), 1)) as pool:
        for f in [pool.submit(call) for call in calls]:
            try:
                f.result()
            except Exception:  # noqa: BLE001 - tear down the rest regardless
                pass

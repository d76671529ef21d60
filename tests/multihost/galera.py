"""A three-node Galera cluster behind HAProxy on loopback, as Kolla-Ansible ran
OpenStack's databases before ProxySQL (its mariadb role until 2025: galera.cnf,
mariadb_clustercheck and the HAProxy ``mariadb`` listener), for
tests/multihost/test_galera.py.

Each node is Debian's mariadbd with galera-4 (tests/fixtures/mariadb_fixture.py's
server plus the wsrep options): a data directory, SQL port, group port
(gmcast.listen_addr), IST port and SST port of its own, all on 127.0.0.1. The
first node bootstraps the cluster (``--wsrep-new-cluster``); the others join it
by a full state transfer (SST), the second by mariabackup (Kolla's
``mariadb_wsrep_sst_method``), the third by rsync. mariadbd, and so the SST
scripts, run as Debian's ``mysql`` user when the tests run as root (``os_user``),
and mariabackup reaches the donor as ``mysql@localhost`` over its unix socket
(socket authentication, made by mariadb-install-db). A killed node restarts
from the position ``mariadbd --wsrep-recover`` finds, as Debian's
galera_recovery does, and catches up by an incremental transfer (IST).

Beside each node a clustercheck: socat on a port of its own runs a shell script
per connection that answers HTTP 200 while the node is Synced (or a donor,
Kolla's AVAILABLE_WHEN_DONOR=1) and 503 otherwise. HAProxy (``haproxy -db``, a
configuration of its own in the cluster's temp dir) listens twice:

- ``mariadb``: Kolla's listener. TCP, client and server keep-alives, one-hour
  timeouts, ``option httpchk`` against the clustercheck, ``inter 2000 rise 2
  fall 5``, the first node the writer and the other two ``backup`` (HAProxy
  sends to the first backup only while the writer is down);
- ``mariadb_aa``: the same with the first two nodes both active (round robin)
  and the third a backup: two writers, to force certification conflicts.
"""
import concurrent.futures
import getpass
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

from tests.fixtures import mariadb_fixture
from tests.fixtures import stack
from tests.fixtures.stack import free_port, stop_child
from tests.multihost import chaos

PROVIDER = '/usr/lib/galera/libgalera_smm.so'
CLUSTER_NAME = 'steward-galera'
#: wsrep_local_state: 4 Synced, 2 Donor/Desynced (clustercheck's 200s).
SYNCED, DONOR = '4', '2'

_CLUSTERCHECK = """#!/bin/sh
# Kolla's mariadb_clustercheck: HTTP 200 while this node is Synced (4) or a donor
# (2, AVAILABLE_WHEN_DONOR=1), 503 otherwise; socat runs one per connection.
read -r _request
state=$(mariadb --no-defaults -S "$1" -u root -Nse \\
  "SHOW STATUS LIKE 'wsrep_local_state'" 2>/dev/null | cut -f2)
if [ "$state" = 4 ] || [ "$state" = 2 ]; then
  body='Galera cluster node is synced.'
  printf 'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\nConnection: close\\r\\n'
else
  body='Galera cluster node is not synced.'
  printf 'HTTP/1.1 503 Service Unavailable\\r\\nContent-Type: text/plain\\r\\n'
  printf 'Connection: close\\r\\n'
fi
printf 'Content-Length: %d\\r\\n\\r\\n%s' "${#body}" "$body"
"""


def installed():
    return mariadb_fixture.installed() and os.path.exists(PROVIDER) and \
        bool(shutil.which('mariabackup') and shutil.which('socat')
             and _haproxy())


def _haproxy():
    return shutil.which('haproxy', path='/usr/sbin:/usr/bin:' + os.environ.get('PATH', ''))


def os_user():
    """Whom the nodes run as: Debian's ``mysql`` when the tests run as root (as
    the package runs mariadbd; the state transfers then run as mysql too, where
    as root rsync's daemon would drop to nobody), otherwise whoever runs them."""
    if os.geteuid() == 0:
        try:
            pwd.getpwnam('mysql')
            return 'mysql'
        except KeyError:
            pass
    return getpass.getuser()


class Node(mariadb_fixture.MariaDBServer):
    """One Galera node: a MariaDB server with the wsrep options of Kolla's
    galera.cnf, its ports on 127.0.0.1."""

    def __init__(self, base, name, peers, sst_method='mariabackup'):
        os.makedirs(base)
        self.os_user = os_user()
        shutil.chown(base, self.os_user)
        self.sst_method = sst_method
        # Ports below the kernel's ephemeral range (stack.free_port): a killed
        # node binds its ports again when it restarts, and meanwhile one from the
        # range may have become the local end of some outgoing connection (a
        # restarted node's IST receiver once could not listen: "IST will be
        # unavailable").
        super().__init__(base, stack.free_port())
        self.name = name
        self.gcomm_port, self.ist_port, self.sst_port, self.check_port = (
            stack.free_port() for _ in range(4))
        self.peers = peers        # every node's gcomm port, this one's included
        self.bootstrap = False
        self.start_position = None
        self.check = None         # the clustercheck's socat

    def _command(self):
        addr = '127.0.0.1'
        # A defaults file of the node's own instead of --no-defaults: the SST
        # scripts read their options with my_print_defaults, which without one
        # reads the machine's /etc/mysql (its socket, its syslog).
        # The buffer pool's size there too, not on the command line: the
        # mariabackup SST script hands mariadbd's arguments to mariadb-backup,
        # which refuses that one ("unknown variable").
        cmd = super()._command()
        assert cmd[1] == '--no-defaults'
        pool = [a for a in cmd if a.startswith('--innodb-buffer-pool-size=')]
        cnf = os.path.join(self.base, 'my.cnf')
        with open(cnf, 'w') as f:
            f.write(f'[mysqld]\ndatadir={self.datadir}\nsocket={self.socket}\n'
                    f'port={self.port}\n' + ''.join(a[2:] + '\n' for a in pool) +
                    f'[client]\nsocket={self.socket}\n'
                    # The SST script's messages in the node's error log.
                    f'[sst]\nsst-syslog=-1\n')
        cmd = [cmd[0], f'--defaults-file={cnf}'] + [
            a for a in cmd[2:] if a not in pool and a != '--user=root']
        return cmd + [f'--user={self.os_user}',
            '--binlog-format=ROW', '--default-storage-engine=innodb',
            '--innodb-autoinc-lock-mode=2',
            '--wsrep-on=ON', f'--wsrep-provider={PROVIDER}',
            f'--wsrep-cluster-name={CLUSTER_NAME}',
            '--wsrep-cluster-address=gcomm://' + ','.join(
                f'{addr}:{p}' for p in self.peers()),
            f'--wsrep-node-address={addr}:{self.gcomm_port}',
            f'--wsrep-node-name={self.name}',
            f'--wsrep-provider-options=gmcast.listen_addr=tcp://{addr}:'
            f'{self.gcomm_port};ist.recv_addr={addr}:{self.ist_port};gcache.size=64M',
            f'--wsrep-sst-receive-address={addr}:{self.sst_port}',
            f'--wsrep-sst-method={self.sst_method}', f'--wsrep-sst-auth={self.os_user}:',
            '--wsrep-slave-threads=2',
        ] + (['--wsrep-new-cluster'] if self.bootstrap else []) + (
            [f'--wsrep-start-position={self.start_position}']
            if self.start_position else [])

    def recover_position(self):
        """``mariadbd --wsrep-recover``: the last committed position (uuid:seqno)
        InnoDB holds, as galera_recovery prints it."""
        log = os.path.join(self.base, 'recover.log')
        cmd = [a for a in self._command() if not a.startswith('--log-error=')]
        out = subprocess.run(cmd + ['--wsrep-recover', f'--log-error={log}'],
                             capture_output=True, text=True, timeout=120)
        with open(log, errors='replace') as f:
            text = f.read()
        found = re.search(r'WSREP: Recovered position: (\S+)', text)
        if out.returncode or not found:
            raise RuntimeError(f'{self.name}: wsrep recovery failed:\n{text[-3000:]}')
        return found.group(1)

    def status(self, name):
        """SHOW STATUS ``name`` as the node says it, or None while it does not
        answer."""
        out = subprocess.run([mariadb_fixture._client(), '--no-defaults', '-S',
                              self.socket, '-u', 'root', '-Nse',
                              f"SHOW STATUS LIKE '{name}'"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode:
            return None
        return out.stdout.split('\t')[1].strip() if '\t' in out.stdout else None

    def synced(self):
        return self.alive() and self.status('wsrep_local_state') == SYNCED

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def join(self, timeout):
        """Start, then wait until the node is Synced. A node that ran before
        starts from the position it recovers, as Debian's systemd unit does
        (galera_recovery): after a kill -9 its grastate.dat says seqno -1, and
        without the position it would need a full state transfer."""
        if not os.path.exists(self.datadir):
            self.install()
        self.start_position = None
        if os.path.exists(os.path.join(self.datadir, 'grastate.dat')):
            self.start_position = self.recover_position()
        self._launch()
        deadline = time.monotonic() + timeout
        while not self.synced():
            if not self.alive():
                raise RuntimeError(f'{self.name} exited with {self.proc.returncode}:\n'
                                   + self.tail(6000))
            if time.monotonic() > deadline:
                raise RuntimeError(f'{self.name} not Synced within {timeout} s:\n'
                                   + self.tail(6000))
            time.sleep(0.3)

    def install(self, user=None):
        super().install(user or self.os_user)

    def kill9(self):
        """kill -9 of mariadbd: no shutdown, its connections cut, its data as the
        crash left it."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(30)

    def start_check(self, script):
        self.check = subprocess.Popen(
            ['socat', f'TCP-LISTEN:{self.check_port},bind=127.0.0.1,fork,reuseaddr',
             f'EXEC:{script} {self.socket}'],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self):
        """Gone with its data: killed, a throw-away node needs no clean shutdown
        (Galera's takes seconds per node)."""
        if self.check is not None:
            stop_child(self.check, timeout=10)
        self.kill9()
        super().stop()


class Galera:
    """Three nodes, their clusterchecks and HAProxy: ``url(db)`` is the
    active/backup listener's (Kolla's), ``url(db, active_active=True)`` the
    two-writer one's."""

    def __init__(self, size=3):
        self.base = tempfile.mkdtemp(prefix='steward-galera-')
        os.chmod(self.base, 0o711)      # the nodes' own directories are theirs
        self.nodes = []
        for i in range(1, size + 1):
            # Both of Debian's state transfers that copy the files, as root: the
            # second node joins by mariabackup (Kolla's), the third by rsync.
            self.nodes.append(Node(os.path.join(self.base, f'node{i}'), f'node{i}',
                                   lambda: [n.gcomm_port for n in self.nodes],
                                   sst_method='rsync' if i == 3 else 'mariabackup'))
        self.port, self.aa_port = free_port(), free_port()
        self.haproxy = None
        self.haproxy_sock = os.path.join(self.base, 'haproxy.sock')

    # -- lifecycle --------------------------------------------------------------------
    def start(self, timeout=240):
        try:
            first = self.nodes[0]
            first.bootstrap = True
            first.install()
            first.join(timeout)
            first.bootstrap = False     # a restart joins the running cluster
            first.sql(f"CREATE USER '{mariadb_fixture.USER}'@'127.0.0.1' "
                      f"IDENTIFIED BY '{mariadb_fixture.PASSWORD}'")
            first.sql(f"GRANT ALL ON *.* TO '{mariadb_fixture.USER}'@'127.0.0.1'")
            # One joiner at a time: each takes a full state transfer (SST) from a
            # donor, and a donor serves one.
            for node in self.nodes[1:]:
                node.join(timeout)
            script = os.path.join(self.base, 'clustercheck')
            with open(script, 'w') as f:
                f.write(_CLUSTERCHECK)
            os.chmod(script, 0o755)
            for node in self.nodes:
                node.start_check(script)
            self.start_haproxy()
            self.wait_for(lambda: all(s == 'UP' for s in self.server_states().values()),
                          'HAProxy seeing every node up', timeout=60)
        except BaseException:
            self.stop()
            raise
        return self

    def haproxy_conf(self):
        def listen(name, port, active):
            out = [f'listen {name}', f'    bind 127.0.0.1:{port}', '    mode tcp',
                   '    option clitcpka', '    timeout client 3600s',
                   '    option srvtcpka', '    timeout server 3600s',
                   '    option httpchk']
            for i, node in enumerate(self.nodes):
                out.append(f'    server {node.name} 127.0.0.1:{node.port} check port '
                           f'{node.check_port} inter 2000 rise 2 fall 5'
                           + ('' if i < active else ' backup'))
            return out
        return '\n'.join([
            'global', '    maxconn 4000',
            f'    stats socket {self.haproxy_sock} mode 600 level admin',
            'defaults', '    option redispatch', '    retries 3',
            '    timeout connect 10s', '    timeout client 1m', '    timeout server 1m',
            '    timeout check 10s', '    balance roundrobin', ''] +
            listen('mariadb', self.port, 1) + [''] +
            listen('mariadb_aa', self.aa_port, 2) + [''])

    def start_haproxy(self):
        conf = os.path.join(self.base, 'haproxy.cfg')
        with open(conf, 'w') as f:
            f.write(self.haproxy_conf())
        self.haproxy = subprocess.Popen(
            [_haproxy(), '-db', '-f', conf], stdin=subprocess.DEVNULL,
            stdout=open(os.path.join(self.base, 'haproxy.log'), 'ab'),
            stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_for(lambda: os.path.exists(self.haproxy_sock), 'HAProxy', timeout=30)

    def stop(self):
        if self.haproxy is not None:
            stop_child(self.haproxy, timeout=10)
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def wait_for(self, predicate, what, timeout):
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.haproxy is not None and self.haproxy.poll() is not None:
                raise RuntimeError('haproxy exited:\n' + self.haproxy_log())
            if time.monotonic() > deadline:
                raise RuntimeError(f'timed out waiting for {what}: HAProxy says '
                                   f'{self.server_states()}')
            time.sleep(0.2)

    # -- views ------------------------------------------------------------------------
    def url(self, database, active_active=False):
        port = self.aa_port if active_active else self.port
        return (f'mysql+mysqldb://{mariadb_fixture.USER}:{mariadb_fixture.PASSWORD}'
                f'@127.0.0.1:{port}/{database}?charset=utf8mb4')

    def create_database(self, name):
        self.nodes[0].sql(f'CREATE DATABASE {name} CHARACTER SET utf8mb4')

    def haproxy_command(self, command):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(self.haproxy_sock)
            s.sendall(command.encode() + b'\n')
            out = b''
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def server_states(self, listener='mariadb'):
        """{node name: HAProxy's status of it (UP, DOWN, UP 1/2...)} on ``listener``."""
        if not os.path.exists(self.haproxy_sock):
            return {}
        lines = self.haproxy_command('show stat').splitlines()
        header = lines[0].lstrip('# ').split(',')
        out = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(',')))
            if row.get('pxname') == listener and row.get('svname') not in (
                    'FRONTEND', 'BACKEND', None):
                out[row['svname']] = row['status']
        return out

    def conflicts(self):
        """{node: wsrep_local_cert_failures + wsrep_local_bf_aborts} of the live
        nodes (counted since each started): the transactions Galera rolled back
        as a conflict with another node's, each a 1213 to its client."""
        out = {}
        for node in self.nodes:
            if node.alive():
                out[node.name] = sum(int(node.status(name) or 0) for name in (
                    'wsrep_local_cert_failures', 'wsrep_local_bf_aborts'))
        return out

    def haproxy_log(self):
        with open(os.path.join(self.base, 'haproxy.log'), errors='replace') as f:
            return f.read()[-3000:]


class Deployment(chaos.ChaosCluster):
    """The multi-host deployment (chaos.py's: one conductor running its repairs
    every 2 s, two API workers, agents on two hosts) on the Galera cluster,
    every service's [database] connection through HAProxy with Kolla's
    connection_recycle_time (10 s) and max_retries (-1: a service that starts
    while no node answers waits for one). ``writers(2)`` moves the API and the
    conductor to the two-writer listener."""
    netns_tag = 'g'

    def __init__(self, **kw):
        kw.setdefault('api_workers', 2)
        super().__init__(database='mysql', **kw)
        self.galera = None
        self.db_name = f'steward_galera_{uuid.uuid4().hex[:8]}'
        self.n_writers = 1

    def start(self):
        # The Galera cluster (half a minute: two state transfers) starts while
        # the broker does.
        self._galera = concurrent.futures.ThreadPoolExecutor(1).submit(
            lambda: Galera().start())
        try:
            return super().start()
        except BaseException:
            if self.galera is None and self._galera.exception() is None:
                self._galera.result().stop()
            raise

    def start_database_server(self):
        self.galera = self._galera.result()
        self.galera.create_database(self.db_name)
        return self.galera.url(self.db_name)

    def common_conf(self, name, host, broker_host=None):
        conf = super().common_conf(name, host, broker_host)
        conf['database'].update({'connection_recycle_time': 10, 'max_retries': -1})
        if self.n_writers > 1:
            # Two writers: a read on one node waits until it has applied what
            # the other committed before it (read-your-writes across nodes).
            conf['database']['mysql_wsrep_sync_wait'] = 1
        return conf

    def writers(self, n):
        """Every service of the deployment on the listener with ``n`` writers (1:
        Kolla's, 2: active-active), restarted as an operator would after
        changing [database] connection."""
        self.n_writers = n
        self.db_url = self.galera.url(self.db_name, active_active=n > 1)
        self.api_conf()
        for i in range(1, len(self.conductors) + 1):
            self.conductor_conf(i)
        for svc in self.conductors + [self.api]:
            svc.restart()
        self.wait_ready(settle=False)

    def stop(self):
        # Killed: a throw-away deployment's graceful stop (an agent's alone took
        # 8 s) is the other multihost tests' business.
        for svc in self.services():
            svc.kill()
        super().stop()
        if self.galera is not None:
            self.galera.stop()

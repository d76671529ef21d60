"""A throw-away RabbitMQ node (Debian's rabbitmq-server) started by the test or
bench itself: its own Erlang node name, data and log directories, AMQP port,
distribution port and epmd port, all on loopback; the package's own service is
neither needed nor touched."""
import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'
CTL = '/usr/lib/rabbitmq/bin/rabbitmqctl'


def installed():
    return os.path.exists(SERVER)


def require():
    """A test that needs a broker: ``need('rabbitmq')`` when it is not installed."""
    if not installed():
        from tests.fixtures import requirements
        requirements.need('rabbitmq', 'rabbitmq-server is not installed '
                                      '(tools/system-packages.sh installs it)')


@contextlib.contextmanager
def running(base):
    """A RabbitServer in ``base``, started (``require()`` first) and destroyed
    after the block: a test fixture's broker."""
    require()
    server = RabbitServer(base=str(base))
    server.start()
    try:
        yield server
    finally:
        server.destroy()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _epmd():
    found = sorted(glob.glob('/usr/lib/erlang/erts-*/bin/epmd'))
    return found[-1] if found else shutil.which('epmd')


class RabbitServer:
    """``start()`` / ``stop()`` / ``restart()``; the data survives a restart (same
    node name and directories), like a broker restarted by its service manager."""

    def __init__(self, base=None, listen='127.0.0.1', extra_listeners=()):
        self.base = base or tempfile.mkdtemp(prefix='steward-rabbit-')
        self._owns_base = base is None
        os.makedirs(self.base, exist_ok=True)
        self.host = listen
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f'steward{os.getpid()}x{secrets.token_hex(3)}@localhost'
        self.user = 'steward'
        self.password = secrets.token_hex(8)
        self.extra_listeners = tuple(extra_listeners)
        self.proc = None
        self.log_path = os.path.join(self.base, 'console.log')
        self.starts = 0
        self._write_config()

    # -- configuration ----------------------------------------------------------------
    def _write_config(self):
        listeners = [f'{self.host}:{self.port}'] + [f'{a}:{self.port}'
                                                     for a in self.extra_listeners]
        lines = [f'listeners.tcp.{i} = {addr}' for i, addr in enumerate(listeners, 1)]
        lines += [f'default_user = {self.user}', f'default_pass = {self.password}',
                  'disk_free_limit.absolute = 50MB',
                  # Small test hosts: do not let the memory alarm block publishers.
                  'vm_memory_high_watermark.relative = 0.8']
        with open(os.path.join(self.base, 'rabbitmq.conf'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
        with open(os.path.join(self.base, 'enabled_plugins'), 'w') as f:
            f.write('[].\n')

    def _env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith('RABBITMQ_')}
        env.update({
            'HOME': self.base,                       # the Erlang cookie lives here
            'RABBITMQ_NODENAME': self.node,
            'RABBITMQ_NODE_IP_ADDRESS': self.host,
            'RABBITMQ_NODE_PORT': str(self.port),
            'RABBITMQ_DIST_PORT': str(self.dist_port),
            'ERL_EPMD_PORT': str(self.epmd_port),
            'ERL_EPMD_ADDRESS': '127.0.0.1',
            'RABBITMQ_MNESIA_BASE': os.path.join(self.base, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(self.base, 'log'),
            'RABBITMQ_CONFIG_FILE': os.path.join(self.base, 'rabbitmq'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(self.base, 'enabled_plugins'),
            'RABBITMQ_PID_FILE': os.path.join(self.base, 'rabbit.pid'),
            'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS':
                '-kernel inet_dist_use_interface {127,0,0,1}',
        })
        return env

    def url(self, host=None):
        return (f'rabbit://{self.user}:{self.password}@{host or self.host}:'
                f'{self.port}/')

    # -- lifecycle --------------------------------------------------------------------
    def start(self, timeout=90, attempts=3):
        """Start and wait for an AMQP login. A port picked free may be taken by
        someone else before the node binds it: a first start then tries new ports
        (a restart keeps its ports, clients know them)."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except RuntimeError as err:
                taken = 'already_used' in str(err) or 'eaddrinuse' in str(err)
                if not taken or self.starts > 1 or attempt == attempts - 1:
                    raise
                self.stop(kill=True)
                self.starts -= 1
                self.port, self.dist_port, self.epmd_port = (free_port() for _ in range(3))
                self._write_config()
                shutil.rmtree(os.path.join(self.base, 'mnesia'), ignore_errors=True)

    def _start(self, timeout):
        log = open(self.log_path, 'ab')
        self.proc = subprocess.Popen([SERVER], env=self._env(), cwd=self.base,
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f'rabbitmq-server exited ({self.proc.returncode}):\n'
                                   + self.tail())
            if time.monotonic() > deadline:
                raise RuntimeError('rabbitmq-server not ready:\n' + self.tail())
            time.sleep(0.2)
        return self

    def ready(self):
        """True once an AMQP login succeeds (the listener opens before the default
        user and vhost exist)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                pass
        except OSError:
            return False
        import kombu
        try:
            with kombu.Connection(f'amqp://{self.user}:{self.password}@{self.host}:'
                                  f'{self.port}//', connect_timeout=2) as conn:
                conn.connect()
            return True
        except Exception:  # noqa: BLE001 - not ready yet, whatever the reason
            return False

    def stop(self, kill=False, timeout=60):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self, kill=False):
        self.stop(kill=kill)
        return self.start()

    def destroy(self):
        self.stop()
        epmd = _epmd()
        if epmd:
            # epmd daemonised itself out of our process group; only ours listens here.
            subprocess.run([epmd, '-port', str(self.epmd_port), '-kill'],
                           capture_output=True, timeout=10)
        if self._owns_base:
            shutil.rmtree(self.base, ignore_errors=True)

    # -- inspection -------------------------------------------------------------------
    def consumers(self, queue):
        """Consumers on ``queue`` (0 when it does not exist): how a test knows a
        service has reconnected and re-declared its queue."""
        import kombu
        # connect_timeout: callers poll this until a count is right, most without
        # catching errors; a broker that is down refuses at once, a loaded one can
        # take more than 2 s to finish a handshake.
        with kombu.Connection(f'amqp://{self.user}:{self.password}@{self.host}:'
                              f'{self.port}//', connect_timeout=30) as conn:
            channel = conn.channel()
            try:
                _name, _messages, consumers = channel.queue_declare(queue=queue,
                                                                    passive=True)
            except Exception:  # noqa: BLE001 - NOT_FOUND closes the channel
                return 0
            return consumers

    def queues(self):
        """The names of the broker's queues."""
        out = subprocess.run([CTL, '-n', self.node, 'list_queues', '-q',
                              '--no-table-headers', 'name'],
                             env=self._env(), capture_output=True, text=True,
                             check=True, timeout=120).stdout
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    def queued(self, queue):
        """Messages on ``queue`` not yet acknowledged, waiting or delivered (0 when
        it does not exist): how a benchmark knows every cast it sent was handled."""
        out = subprocess.run([CTL, '-n', self.node, 'list_queues', '-q',
                              '--no-table-headers', 'name', 'messages'],
                             env=self._env(), capture_output=True, text=True,
                             check=True, timeout=120).stdout
        for line in out.splitlines():
            name, _, count = line.strip().rpartition('\t')
            if name == queue:
                return int(count)
        return 0

    def tail(self, n=3000):
        out = []
        for path in [self.log_path] + glob.glob(os.path.join(self.base, 'log', '*.log')):
            try:
                with open(path, errors='replace') as f:
                    out.append(f'--- {path}\n' + f.read()[-n:])
            except OSError:
                pass
        return '\n'.join(out)

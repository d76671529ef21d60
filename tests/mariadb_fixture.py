"""A real MariaDB server for the tests (Cyborg's production database is MySQL or
MariaDB): a throw-away data directory (mariadb-install-db) under a temp dir,
``mariadbd`` on a free loopback port and a socket of its own, one per pytest
process, stopped with SIGTERM (a clean shutdown) at exit. ``None`` when the server
binaries are not installed (tools/system-packages.sh installs Debian's
mariadb-server); callers go through tests/requirements.py ``need('mariadb')``.

Run as root the server keeps root's uid (``--user=root``: the data directory is
root's own temp dir); otherwise it runs as whoever runs the tests. Tests connect
over TCP as a password user, as a deployed Cyborg does."""
import atexit
import getpass
import os
import shutil
import subprocess
import tempfile
import threading
import time

from tests.stack import free_port, stop_child

_lock = threading.Lock()
_server = None
USER, PASSWORD = 'steward', 'steward'


class MariaDBServer:
    def __init__(self, base, port):
        self.base, self.port = base, port
        self.datadir = os.path.join(base, 'data')
        self.socket = os.path.join(base, 'mariadb.sock')
        self.log = os.path.join(base, 'error.log')
        self.proc = None

    def url(self, database):
        """SQLAlchemy URL through PyMySQL, the driver of Steward's ``mysql`` extra."""
        return (f'mysql+pymysql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}'
                f'?charset=utf8mb4')

    def sql(self, statement):
        """One statement as the server's admin (unix socket authentication)."""
        subprocess.run([_client(), '--no-defaults', '-S', self.socket, '-u',
                        getpass.getuser(), '-e', statement], check=True,
                       capture_output=True, text=True, timeout=60)

    def create_database(self, name):
        self.sql(f'CREATE DATABASE {name} CHARACTER SET utf8mb4')
        return self.url(name)

    def connect(self, database=None):
        """A PyMySQL connection as the test user (autocommit)."""
        import pymysql
        return pymysql.connect(host='127.0.0.1', port=self.port, user=USER,
                               password=PASSWORD, database=database,
                               charset='utf8mb4', autocommit=True)

    def snapshot(self, database):
        """What ``clone`` rebuilds ``database`` from: each table's own DDL as the
        server prints it (SHOW CREATE TABLE: columns, indexes, foreign keys,
        defaults, charset, exactly as the migrations left them) and its rows.
        MariaDB has no CREATE DATABASE ... TEMPLATE, and CREATE TABLE ... LIKE
        drops the foreign keys."""
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                cur.execute('SHOW FULL TABLES WHERE Table_type = %s', ('BASE TABLE',))
                tables = [row[0] for row in cur.fetchall()]
                out = []
                for table in tables:
                    cur.execute(f'SHOW CREATE TABLE `{table}`')
                    ddl = cur.fetchone()[1]
                    cur.execute(f'SELECT * FROM `{table}`')
                    out.append((table, ddl, cur.fetchall()))
                return out
        finally:
            conn.close()

    def clone(self, snapshot, name):
        """A new database ``name`` made of ``snapshot`` (see there); its URL."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE {name} CHARACTER SET utf8mb4')
                cur.execute(f'USE {name}')
                # Tables in any order: their foreign keys name tables made later.
                cur.execute('SET foreign_key_checks = 0')
                for table, ddl, rows in snapshot:
                    cur.execute(ddl)
                    if rows:
                        marks = ', '.join(['%s'] * len(rows[0]))
                        cur.executemany(f'INSERT INTO `{table}` VALUES ({marks})', rows)
        finally:
            conn.close()
        return self.url(name)

    def drop(self, name):
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS {name}')
        finally:
            conn.close()

    def start(self):
        user = getpass.getuser()
        out = subprocess.run(['mariadb-install-db', '--no-defaults',
                              f'--datadir={self.datadir}', f'--user={user}',
                              '--skip-test-db', '--auth-root-authentication-method=socket'],
                             capture_output=True, text=True, timeout=120)
        if out.returncode:
            raise RuntimeError('mariadb-install-db failed:\n'
                               + (out.stdout + out.stderr)[-3000:])
        self._launch()
        self._wait(lambda: self.sql(
            f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}'"))
        self.sql(f"GRANT ALL ON *.* TO '{USER}'@'127.0.0.1'")

    def restart(self):
        """Start again on the same data directory and port (after ``shutdown``)."""
        self._launch()
        self._wait(lambda: self.sql('SELECT 1'))

    def shutdown(self):
        """A clean shutdown (SIGTERM), as a server restart does; the data stays."""
        if self.proc is not None:
            stop_child(self.proc, timeout=60)
            self.proc = None

    def _launch(self):
        cmd = [_server_binary(), '--no-defaults', f'--datadir={self.datadir}',
               f'--socket={self.socket}', f'--port={self.port}',
               '--bind-address=127.0.0.1', f'--pid-file={self.base}/mariadb.pid',
               f'--log-error={self.log}', '--skip-name-resolve', '--skip-log-bin',
               # A test database: durability traded for speed, small memory; the
               # tables in the system tablespace (no file per table: a test's
               # database is cloned in a third less time, conftest.py ``db``).
               '--innodb-flush-log-at-trx-commit=0', '--innodb-buffer-pool-size=64M',
               '--max-connections=200', '--innodb-file-per-table=0',
               '--innodb-doublewrite=0']
        if os.geteuid() == 0:
            cmd.append('--user=root')
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def _wait(self, first_statement):
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f'mariadbd exited with {self.proc.returncode}:\n'
                                   + self.tail())
            try:
                first_statement()
                return
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise RuntimeError('mariadbd did not answer within 60 s:\n'
                                       + self.tail())
                time.sleep(0.2)

    def tail(self, n=3000):
        try:
            with open(self.log, errors='replace') as f:
                return f.read()[-n:]
        except OSError as exc:
            return str(exc)

    def stop(self):
        self.shutdown()
        shutil.rmtree(self.base, ignore_errors=True)


def _server_binary():
    # /usr/sbin is not on every user's PATH.
    path = '/usr/sbin:/usr/bin:' + os.environ.get('PATH', '')
    return shutil.which('mariadbd', path=path) or shutil.which('mysqld', path=path)


def _client():
    return shutil.which('mariadb') or shutil.which('mysql')


def installed():
    return bool(_server_binary() and _client() and shutil.which('mariadb-install-db'))


def get_mariadb():
    """The per-process server, or None when MariaDB is not installed."""
    global _server
    with _lock:
        if _server is not None:
            return _server
        if not installed():
            return None
        server = MariaDBServer(tempfile.mkdtemp(prefix='steward-mariadb-'), free_port())
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        atexit.register(server.stop)
        _server = server
        return server

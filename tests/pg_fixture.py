"""A real PostgreSQL server for the tests: a throw-away cluster (initdb) started
on a free loopback port, one per pytest process. Skips when the server binaries
are not installed (tools/system-packages.sh installs them)."""
import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time

_lock = threading.Lock()
_server = None


class PostgresServer:
    def __init__(self, bindir, datadir, port, run_as):
        self.bindir, self.datadir, self.port, self.run_as = bindir, datadir, port, run_as

    def url(self, database):
        return f'postgresql+psycopg2://steward@127.0.0.1:{self.port}/{database}'

    def psql(self, sql, database='postgres'):
        subprocess.run([os.path.join(self.bindir, 'psql'), '-h', '127.0.0.1', '-p',
                        str(self.port), '-U', 'steward', '-d', database, '-v',
                        'ON_ERROR_STOP=1', '-q', '-c', sql], check=True,
                       capture_output=True, text=True)

    def stop(self):
        self._as_owner([os.path.join(self.bindir, 'pg_ctl'), '-D', self.datadir, '-m',
                        'immediate', 'stop'], check=False)
        shutil.rmtree(os.path.dirname(self.datadir), ignore_errors=True)

    def _as_owner(self, cmd, check=True):
        if self.run_as:
            cmd = ['runuser', '-u', self.run_as, '--'] + cmd
        return subprocess.run(cmd, check=check, capture_output=True, text=True)


def _bindir():
    found = sorted(glob.glob('/usr/lib/postgresql/*/bin/initdb'))
    return os.path.dirname(found[-1]) if found else None


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def start_server():
    """A new throw-away server (a test that stops it owns it), or None when
    PostgreSQL is not installed. Removed at exit."""
    bindir = _bindir()
    if bindir is None:
        return None
    # initdb refuses to run as root: use the package's postgres user.
    run_as = 'postgres' if os.geteuid() == 0 else None
    base = tempfile.mkdtemp(prefix='steward-pg-')
    datadir = os.path.join(base, 'data')
    if run_as:
        uid = pwd.getpwnam(run_as).pw_uid
        os.chown(base, uid, -1)
    port = _free_port()
    server = PostgresServer(bindir, datadir, port, run_as)
    server._as_owner([os.path.join(bindir, 'initdb'), '-D', datadir, '-U', 'steward',
                      '--auth=trust', '-E', 'UTF8'])
    server._as_owner([os.path.join(bindir, 'pg_ctl'), '-D', datadir, '-w', '-l',
                      os.path.join(base, 'log'), '-o',
                      f'-p {port} -k {base} -c listen_addresses=127.0.0.1 '
                      f'-c max_connections=200 -c fsync=off', 'start'])
    deadline = time.monotonic() + 30
    while True:
        try:
            server.psql('SELECT 1')
            break
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    atexit.register(server.stop)
    return server


def get_postgres():
    """The per-process server, or None when PostgreSQL is not installed."""
    global _server
    with _lock:
        if _server is None:
            _server = start_server()
        return _server

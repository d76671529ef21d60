"""The parent's handle on the embedded Placement child (``python -m
steward.placement.embedded``): start it, wait until it answers, stop it.

The child gets SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG); its own
workers follow it (steward/supervisor.py).

`steward serve` gives the child a second listener, a Unix socket in a directory
of its own, served by worker processes of their own, for its own Placement client
(``steward_url``): a long query of allocation candidates from Nova or another
client on ``[placement] embedded_port`` never holds a worker Steward's writes need.
"""
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from steward import lifetime
from steward.common import exception
from steward.common import netutils
from steward.placement import unix_http

# The connection URL travels to the child in the environment, not argv: a MySQL URL
# carries a password that `ps` would show to every user of the host.
CONNECTION_ENV = 'STEWARD_PLACEMENT_CONNECTION'
# Lets the parent tell its own child's answer from another server's on the same port.
PID_HEADER = 'X-Steward-Placement-Pid'
LOG = logging.getLogger(__name__)


def _probe(url, timeout):
    """(status, pid header, JSON body or None) of GET url/, or None if nothing answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url + '/', timeout=timeout) as resp:
            status, pid, raw = resp.status, resp.headers.get(PID_HEADER), resp.read()
    except urllib.error.HTTPError as exc:
        status, pid, raw = exc.code, exc.headers.get(PID_HEADER), b''
    except (OSError, ValueError):
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    return status, pid, body


def _is_placement_doc(body):
    return isinstance(body, dict) and isinstance(body.get('versions'), list)


def _tail(path, limit=4000):
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode('utf-8', 'replace').strip()
    except OSError as exc:
        return '(log unreadable: %s)' % exc


class EmbeddedProcess:
    """A Placement child process; ``stop()`` terminates it."""

    def __init__(self, proc, url, log_file, owns_log, host=None, port=None,
                 steward_url=None):
        self._proc = proc
        self.pid = proc.pid
        self.url = url
        # Steward's own lane (an http+unix:// URL), or None: everything on url.
        self.steward_url = steward_url
        self.log_file = log_file
        self._owns_log = owns_log
        self.host, self.port = host, port

    def wait_ready(self, timeout=30.0):
        """Wait until the child answers ``GET /`` (the answer carries its pid);
        stops it and raises EmbeddedPlacementError if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while True:
            rc = self._proc.poll()
            if rc is not None:
                self._failed_start('the child exited with status %s before answering' % rc)
            found = _probe(self.url, 1.0)
            # Only our child's answer counts: another server may have taken the port.
            if found and found[0] == 200 and found[1] == str(self.pid):
                LOG.info('Embedded Placement (pid %d) answers on %s', self.pid, self.url)
                return self
            if time.monotonic() > deadline:
                self._failed_start('no answer to GET / within %.0f s' % timeout)
            time.sleep(0.02)

    def _failed_start(self, what):
        """Stop the child and raise EmbeddedPlacementError saying ``what`` with
        the end of its log, which is kept for the operator."""
        tail = _tail(self.log_file)
        self._owns_log = False
        self.stop()
        raise exception.EmbeddedPlacementError(
            host=self.host, port=self.port,
            reason='%s; log %s ends with:\n%s' % (what, self.log_file, tail))

    def wait_exit(self):
        """Block until the child exits; reaps it and returns its status."""
        return self._proc.wait()

    def stop(self, timeout=10.0):
        """Stop the child at once: SIGINT, which gunicorn takes as a quick stop.
        (Its SIGTERM, which the child also gets when this process dies, lets kept-
        alive connections linger for seconds; whoever calls stop() is done with
        Placement.)"""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._owns_log:
            try:
                os.unlink(self.log_file)
            except OSError:
                pass
        return self._proc.returncode


def steward_socket_path():
    """Where a child's Steward lane listens: a Unix socket in a new directory only
    this user may enter (mkdtemp's 0700), so no other local user reaches that
    noauth2 listener. Under the temporary directory, not state_path: a socket's
    path holds at most 107 bytes, fewer than a deep state_path leaves. The caller
    removes it (``remove_steward_socket``) once done with every child on it."""
    return os.path.join(tempfile.mkdtemp(prefix='steward-placement-'), 'steward.sock')


def remove_steward_socket(path):
    """Remove a ``steward_socket_path()`` and its directory (gunicorn unlinks the
    socket when it stops; not when it is killed)."""
    for remove, what in ((os.unlink, path), (os.rmdir, os.path.dirname(path))):
        try:
            remove(what)
        except OSError:
            pass


def start_subprocess(connection, host='127.0.0.1', port=8778, log_file=None,
                     timeout=30.0, wait=True, workers=2, threads=None,
                     config_file=None, steward_socket=None, steward_workers=1):
    """Start Placement in a child process and wait until it answers ``GET /``
    (``wait=False``: return at once; the caller calls ``wait_ready()`` later and
    does its own start-up meanwhile, on the other core).

    ``threads``: per worker process (None: the child's default);
    ``config_file``: Placement's options (steward/placement/settings.py);
    ``steward_socket``: a ``steward_socket_path()`` where ``steward_workers``
    processes of their own serve Steward's client (the child's ``steward_url``).

    The child gets SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG). The
    signal follows the *thread* that forked, so call this from a long-lived thread
    (the main thread of a service). Without ``log_file`` the child logs to a
    temporary file removed by ``stop()``.
    """
    url = netutils.local_url(host, port)
    found = _probe(url, 1.0)
    if found and _is_placement_doc(found[2]):
        raise exception.EmbeddedPlacementError(
            host=host, port=port,
            reason='a Placement service already answers on port %d (not started by '
                   'this process); stop it or set [placement] embedded_port to a free '
                   'port' % port)

    owns_log = log_file is None
    if owns_log:
        fd, log_file = tempfile.mkstemp(prefix='steward-placement-', suffix='.log')
        log = os.fdopen(fd, 'ab')
    else:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        log = open(log_file, 'ab')

    env = dict(os.environ)
    env[CONNECTION_ENV] = connection
    # The child must import this very steward even when it is not installed.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env['PYTHONPATH'] = os.pathsep.join(p for p in (src, env.get('PYTHONPATH')) if p)
    argv = [sys.executable, '-m', 'steward.placement.embedded',
            '--host', host, '--port', str(port), '--workers', str(workers)]
    if threads is not None:
        argv += ['--threads', str(threads)]
    if config_file:
        argv += ['--config-file', os.path.abspath(config_file)]
    if steward_socket:
        argv += ['--steward-bind', 'unix:' + steward_socket,
                 '--steward-workers', str(steward_workers)]
    with log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, close_fds=True, preexec_fn=lifetime.preexec_die_with_parent())
    child = EmbeddedProcess(proc, url, log_file, owns_log, host, port,
                            unix_http.url_for(steward_socket) if steward_socket else None)
    if wait:
        child.wait_ready(timeout)
    return child


# -- from Steward's configuration ------------------------------------------------------
def _conf():
    from steward.conf import CONF
    return CONF


def is_embedded(conf=None):
    conf = conf or _conf()
    return conf.placement.embedded and not (conf.placement.auth_type
                                            or conf.placement.endpoint_override)


def embedded_url(conf=None):
    conf = conf or _conf()
    return f'http://{conf.placement.embedded_host}:{conf.placement.embedded_port}'


def start_embedded(wait=True, steward_socket=None):
    """The embedded Placement child; ``wait=False``: started, not yet answering
    (call its ``wait_ready()`` before using it). ``steward_socket``: its Steward
    lane (``steward_socket_path()``, the same for every child of one serve)."""
    conf = _conf()
    log_file = os.path.join(conf.state_path, 'placement.log')
    proc = start_subprocess(conf.placement.embedded_connection,
                            conf.placement.embedded_host, conf.placement.embedded_port,
                            log_file=log_file, wait=wait,
                            workers=conf.placement.embedded_workers,
                            threads=conf.placement.embedded_threads,
                            config_file=conf.placement.embedded_config_file,
                            steward_socket=steward_socket,
                            steward_workers=conf.placement.embedded_steward_workers)
    # One start-up line per component: start_subprocess() logs the URL.
    LOG.debug('Embedded Placement (pid %s) at %s, log %s', proc.pid, proc.url, log_file)
    return proc

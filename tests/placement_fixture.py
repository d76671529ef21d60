"""A real Placement for tests: one per pytest process (each xdist worker its own).

Placement configures its database layer once per process, so tests share one
server and must use unique provider names (``unique_name``). File SQLite, not
in-memory: the server is threaded and in-memory SQLite is one shared connection.

    from tests.placement_fixture import get_placement, admin_session

    @pytest.fixture(scope='session')
    def placement():
        return get_placement()

A test module of PlacementClient imports the fixtures below (``placement``,
``admin``, ``client``, ``root``) instead of writing them again.
"""
import atexit
import logging
import shutil
import socket
import socketserver
import tempfile
import threading
import uuid
from wsgiref import simple_server

import httpx
import pytest

from steward.common import netutils
from steward.db import sqlite
from steward.placement import app

LOG = logging.getLogger(__name__)

MICROVERSION = '1.39'

_lock = threading.Lock()
_server = None


def get_placement():
    """The process-wide embedded Placement; ``.url`` is its endpoint."""
    global _server
    with _lock:
        if _server is None:
            tmp = tempfile.mkdtemp(prefix='steward-test-placement-')
            wsgi_app = app.build_app('sqlite:///%s/placement.sqlite' % tmp)
            _server = serve(wsgi_app, '127.0.0.1', 0)
            server = _server

            def _cleanup():
                server.shutdown()
                shutil.rmtree(tmp, ignore_errors=True)
            atexit.register(_cleanup)
        return _server


def admin_session(url):
    """An httpx client that talks to Placement as admin at 1.39, bypassing Steward.

    Paths are relative: ``admin_session(p.url).get('/resource_providers')``.
    """
    return httpx.Client(base_url=url, trust_env=False, timeout=30,
                        headers={'X-Auth-Token': 'admin',
                                 'OpenStack-API-Version': 'placement ' + MICROVERSION})


def allocate(url, consumer, rp_uuid, rc):
    """One ``rc`` on ``rp_uuid`` for the instance ``consumer``, written as Nova's
    scheduler claims it (a new consumer), bypassing Steward."""
    with admin_session(url) as s:
        r = s.put(f'/allocations/{consumer}', json={
            'allocations': {rp_uuid: {'resources': {rc: 1}}}, 'project_id': 'p',
            'user_id': 'u', 'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert r.status_code == 204, r.text


def client_and_server():
    """Steward's PlacementClient on the shared Placement, and that Placement."""
    from steward.placement.client import PlacementClient
    server = get_placement()
    return PlacementClient.from_conf(endpoint=server.url), server


def unique_name(prefix='rp'):
    return '%s-%s' % (prefix, uuid.uuid4().hex[:12])


# -- a threaded wsgiref server in a daemon thread of the test process ------------------
class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    # socketserver's default backlog (5) resets bursts of concurrent clients.
    request_queue_size = 128

    def server_bind(self):
        # HTTPServer.server_bind resolves getfqdn(host), a DNS lookup that can stall
        # startup for seconds on hosts with slow resolvers; the name is unused.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]
        self.setup_environ()

    def handle_error(self, request, client_address):
        # A client hanging up mid-response is routine; don't print tracebacks.
        LOG.debug('Error serving %s', client_address, exc_info=True)


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        pass   # Placement's requestlog middleware already logs every request


class EmbeddedServer:
    """A Placement app served from a daemon thread of this process."""

    def __init__(self, httpd, thread):
        self._httpd = httpd
        self._thread = thread
        self.host = httpd.server_address[0]
        self.port = httpd.server_address[1]
        self.url = netutils.local_url(self.host, self.port)

    def shutdown(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def serve(wsgi_app, host='127.0.0.1', port=0):
    """Serve ``app`` on host:port (0 = a free port); returns once listening."""
    url = app.built_url()
    if url is not None and sqlite.sqlite_file(url) == '':
        # In-memory SQLite is one connection shared by all threads: concurrent
        # requests over-commit allocations and can hang the server.
        raise ValueError(
            reason='in-memory SQLite Placement cannot be served by a threaded server; '
                   'use a file database')
    server_class = _ThreadingWSGIServer6 if ':' in host else _ThreadingWSGIServer
    httpd = simple_server.make_server(host, port, wsgi_app, server_class=server_class,
                                      handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={'poll_interval': 0.2},
                              name='placement-%d' % httpd.server_address[1], daemon=True)
    thread.start()
    return EmbeddedServer(httpd, thread)


@pytest.fixture(scope='session')
def placement():
    return get_placement()


@pytest.fixture
def admin(placement):
    with admin_session(placement.url) as session:
        yield session


@pytest.fixture
def client(placement):
    from steward.placement.client import PlacementClient
    return PlacementClient.from_conf(endpoint=placement.url)


@pytest.fixture
def root(client):
    """A compute-node root provider of a unique name."""
    return client.ensure_compute_node(unique_name('host'))

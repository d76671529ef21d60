"""A real Placement for tests: one per pytest process (each xdist worker its own).

Placement configures its database layer once per process, so tests share one
server and must use unique provider names (``unique_name``). File SQLite, not
in-memory: the server is threaded and in-memory SQLite is one shared connection.

    from tests.placement_fixture import get_placement, admin_session

    @pytest.fixture(scope='session')
    def placement():
        return get_placement()
"""
import atexit
import shutil
import tempfile
import threading
import uuid

import httpx

from steward.placement import embedded

MICROVERSION = '1.39'

_lock = threading.Lock()
_server = None


def get_placement():
    """The process-wide embedded Placement; ``.url`` is its endpoint."""
    global _server
    with _lock:
        if _server is None:
            tmp = tempfile.mkdtemp(prefix='steward-test-placement-')
            app = embedded.build_app('sqlite:///%s/placement.sqlite' % tmp)
            _server = embedded.serve(app, '127.0.0.1', 0)
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


def unique_name(prefix='rp'):
    return '%s-%s' % (prefix, uuid.uuid4().hex[:12])

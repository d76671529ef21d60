"""HTTP over a Unix socket for requests (and so keystoneauth): how `steward serve`'s
own Placement client reaches the embedded Placement's Steward lane
(steward/placement/handle.py).

A URL ``http+unix://<socket path, percent-encoded>/<path>`` (the convention of
requests-unixsocket and docker-py) names the socket in its host part; a session
with ``mount(session, url)`` sends every request under that prefix over the one
socket, through urllib3's own connection pool (kept-alive connections, pool size,
timeouts as for TCP). Only the connection is different: no DNS, no port, no proxy.
"""
import socket
import urllib.parse

import requests
from urllib3 import connection
from urllib3 import connectionpool
from urllib3 import exceptions as urllib3_exc

SCHEME = 'http+unix'


def url_for(path):
    """The base URL of the HTTP server listening on the Unix socket ``path``."""
    return f'{SCHEME}://{urllib.parse.quote(path, safe="")}'


def socket_path(url):
    """The socket path named by a ``url_for()`` URL."""
    return urllib.parse.unquote(urllib.parse.urlsplit(url).netloc)


class _UnixConnection(connection.HTTPConnection):
    def __init__(self, *args, socket_path, **kwargs):
        self._socket_path = socket_path
        super().__init__(*args, **kwargs)

    def _new_conn(self):
        # urllib3's own _new_conn, with AF_UNIX in place of a TCP connect: its
        # errors are the ones urllib3 raises for TCP, so requests and keystoneauth
        # report a refused or missing socket as they report a refused port.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except TimeoutError as exc:
            sock.close()
            raise urllib3_exc.ConnectTimeoutError(
                self, f'Connection to {self._socket_path} timed out') from exc
        except OSError as exc:
            sock.close()
            raise urllib3_exc.NewConnectionError(
                self, f'Failed to establish a new connection to '
                      f'{self._socket_path}: {exc}') from exc
        return sock


class _UnixPool(connectionpool.HTTPConnectionPool):
    ConnectionCls = _UnixConnection

    def __init__(self, path, **kwargs):
        # 'localhost' is only the Host header: the socket is the address.
        super().__init__('localhost', **kwargs)
        self.conn_kw['socket_path'] = path


class UnixAdapter(requests.adapters.HTTPAdapter):
    """A requests transport adapter sending everything over one Unix socket."""

    def __init__(self, path, pool_maxsize):
        self._pool = _UnixPool(path, maxsize=pool_maxsize)
        super().__init__(pool_maxsize=pool_maxsize)

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
        return self._pool

    def close(self):
        self._pool.close()
        super().close()


def mount(session, url, pool_maxsize):
    """Make the requests.Session ``session`` send ``url``'s requests over its socket."""
    session.mount(url, UnixAdapter(socket_path(url), pool_maxsize))

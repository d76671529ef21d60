"""The headers of a reverse proxy in front of the API, as oslo.middleware's
http_proxy_to_wsgi reads them (``Forwarded`` first, RFC 7239, else
``X-Forwarded-Proto`` / ``-Host`` / ``-For``; ``X-Forwarded-Prefix`` joins the
root path), with ``[oslo_middleware] enable_proxy_headers_parsing``, and from
the peers of ``[api] trusted_proxies`` only: any other peer's headers are left
unread, or a client could pick the scheme and host of every link it is sent and
the address the request log shows.

This is the only place the API trusts them: Steward's own servers run uvicorn
with its proxy-header handling off, and doc/install.md says how to turn it off
under another server (uvicorn's would trust loopback peers by default).
"""
import ipaddress
import logging

LOG = logging.getLogger(__name__)


def _networks(entries):
    networks = []
    for entry in entries:
        entry = entry.strip()
        if entry:
            networks.append(ipaddress.ip_network(entry, strict=False))
    return tuple(networks)


def _parse_forwarded(value):
    """The first element of an RFC 7239 header: the proxy nearest the client."""
    entry = {}
    for pair in value.split(',', 1)[0].split(';'):
        key, _, val = pair.partition('=')
        entry[key.strip().lower()] = val.strip().strip('"')
    return entry


class ProxyHeaders:
    """Outermost layer: rewrites the scope's scheme, Host header, client address
    and root path from a trusted proxy's headers. Off (and free) unless
    enabled; a request from an untrusted peer passes untouched."""

    def __init__(self, app, enabled, trusted):
        self.app = app
        self.trusted = _networks(trusted) if enabled else ()
        if enabled and not self.trusted:
            LOG.warning('[oslo_middleware] enable_proxy_headers_parsing is true but '
                        '[api] trusted_proxies is empty: no proxy headers are honoured')

    def _is_trusted(self, scope):
        client = scope.get('client')
        if not client:
            return False
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(address in net for net in self.trusted)

    async def __call__(self, scope, receive, send):
        if self.trusted and scope['type'] == 'http' and self._is_trusted(scope):
            self._apply(scope)
        return await self.app(scope, receive, send)

    @staticmethod
    def _apply(scope):
        headers = {}
        for name, value in scope['headers']:
            if name in (b'forwarded', b'x-forwarded-proto', b'x-forwarded-host',
                        b'x-forwarded-for', b'x-forwarded-prefix'):
                headers.setdefault(name, value.decode('latin-1'))
        if not headers:
            return
        if b'forwarded' in headers:
            entry = _parse_forwarded(headers[b'forwarded'])
            proto, host, client = entry.get('proto'), entry.get('host'), entry.get('for')
        else:
            proto = headers.get(b'x-forwarded-proto')
            host = headers.get(b'x-forwarded-host')
            client = headers.get(b'x-forwarded-for')
            # X-Forwarded-For lists every hop: the first is the client.
            client = client.split(',', 1)[0].strip() if client else None
        if proto:
            proto = proto.strip().lower()
            if proto in ('http', 'https'):
                scope['scheme'] = proto
        if host:
            scope['headers'] = [(k, v) for k, v in scope['headers'] if k != b'host'] \
                + [(b'host', host.strip().encode('latin-1'))]
        if client:
            scope['client'] = (client.strip('[]'), 0)
        prefix = headers.get(b'x-forwarded-prefix')
        if prefix:
            prefix = '/' + prefix.strip().strip('/')
            scope['root_path'] = prefix + scope.get('root_path', '')
            scope['path'] = prefix + scope['path']

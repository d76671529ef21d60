"""Cross-origin resource sharing with oslo.middleware's ``[cors]`` options and
the semantics of oslo_middleware.cors (W3C CORS sections 6.1 and 6.2):

* a preflight (``OPTIONS``) is answered here, 200 with no body, before
  authentication; it carries the ``Access-Control-*`` headers only when the
  origin is allowed, the requested method is in ``allow_methods`` and every
  requested header is in ``allow_headers`` or a simple header;
* an actual request from an allowed origin gets ``Vary: Origin``,
  ``Access-Control-Allow-Origin`` (and ``-Allow-Credentials``,
  ``-Expose-Headers``) on its answer, errors included;
* an unknown origin gets no CORS header at all (the browser refuses);
  ``allowed_origin = *`` allows any.

As in Placement (placement/deploy.py), the layer is only there when
``[cors] allowed_origin`` names an origin: without it an ``OPTIONS`` request
is the router's 405 like any unrouted method.
"""

SIMPLE_HEADERS = frozenset(h.upper() for h in (
    'Accept', 'Accept-Language', 'Content-Type', 'Cache-Control', 'Content-Language',
    'Expires', 'Last-Modified', 'Pragma'))


def _split(value):
    return [v.strip() for v in value.split(',') if v.strip()]


class Cors:
    def __init__(self, app, conf):
        self.app = app
        self.origins = frozenset(conf.allowed_origin or ())
        self.credentials = conf.allow_credentials
        self.expose = ','.join(conf.expose_headers).encode('latin-1')
        self.max_age = str(conf.max_age).encode() if conf.max_age else None
        self.methods = frozenset(conf.allow_methods)
        self.headers = frozenset(h.upper() for h in conf.allow_headers) | SIMPLE_HEADERS

    def _origin(self, scope):
        """The allowed origin to answer with, or None."""
        for name, value in scope['headers']:
            if name == b'origin':
                origin = value.decode('latin-1')
                if origin in self.origins:
                    return origin
                return '*' if '*' in self.origins else None
        return None

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http':
            return await self.app(scope, receive, send)
        if scope['method'] == 'OPTIONS':
            return await self._preflight(scope, send)
        origin = self._origin(scope)
        if origin is None:
            return await self.app(scope, receive, send)
        extra = [(b'access-control-allow-origin', origin.encode('latin-1'))]
        if self.credentials:
            extra.append((b'access-control-allow-credentials', b'true'))
        if self.expose:
            extra.append((b'access-control-expose-headers', self.expose))

        async def cors_send(message):
            if message['type'] == 'http.response.start':
                headers = list(message.get('headers', ()))
                vary = [i for i, (k, _) in enumerate(headers) if k.lower() == b'vary']
                if vary:
                    k, v = headers[vary[0]]
                    headers[vary[0]] = (k, v + b',Origin')
                else:
                    headers.append((b'vary', b'Origin'))
                message['headers'] = headers + extra
            await send(message)

        return await self.app(scope, receive, cors_send)

    async def _preflight(self, scope, send):
        headers = [(b'content-length', b'0')]
        origin = self._origin(scope)
        if origin is not None:
            allowed = self._allowed(scope)
            if allowed is not None:
                method, requested = allowed
                headers += [(b'vary', b'Origin'),
                            (b'access-control-allow-origin', origin.encode('latin-1'))]
                if self.credentials:
                    headers.append((b'access-control-allow-credentials', b'true'))
                if self.max_age:
                    headers.append((b'access-control-max-age', self.max_age))
                headers.append((b'access-control-allow-methods', method.encode('latin-1')))
                if requested:
                    headers.append((b'access-control-allow-headers',
                                    ','.join(requested).encode('latin-1')))
        await send({'type': 'http.response.start', 'status': 200, 'headers': headers})
        await send({'type': 'http.response.body', 'body': b''})

    def _allowed(self, scope):
        """(method, [requested headers]) when the preflight asks for what is
        permitted, else None."""
        method = None
        requested = []
        for name, value in scope['headers']:
            if name == b'access-control-request-method':
                method = value.decode('latin-1').strip()
            elif name == b'access-control-request-headers':
                requested += _split(value.decode('latin-1'))
        if method is None or method not in self.methods:
            return None
        if any(h.upper() not in self.headers for h in requested):
            return None
        return method, requested

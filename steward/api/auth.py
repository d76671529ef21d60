"""Who is calling: the RequestContext of every authenticated API request.

``[api] auth_strategy``:

* ``noauth`` (the single-host default): identity from the ``X-Project-Id``,
  ``X-User-Id``, ``X-Roles`` and ``X-Service-Roles`` headers when any of them is
  present (upstream's no-Keystone pipeline); otherwise the caller is an admin
  with a service token (roles admin, member, reader; service role ``service``),
  which is what ``openstack.connect(auth_type='none', ...)`` gets.
* ``keystone``: keystonemiddleware's auth_token validates ``X-Auth-Token`` (and
  ``X-Service-Token``) and sets the identity headers; the context is built from
  those, ``X-Service-Roles`` included.

The version documents (``/`` and ``/v2``) need no identity. The context carries
the request id (``x-openstack-request-id``), which every log line of a state
transition names; ``current_context`` makes it the thread's oslo.context while a
handler runs, so oslo.log prints it on every log line of the request.
"""
import asyncio
import contextlib
import io
import ipaddress
import logging
import re

from oslo_context import context as oslo_context

from steward.common import context as steward_context
from steward.common import exception
from steward.conf import CONF

LOG = logging.getLogger(__name__)

IDENTITY_HEADERS = ('HTTP_X_PROJECT_ID', 'HTTP_X_USER_ID', 'HTTP_X_ROLES',
                    'HTTP_X_SERVICE_ROLES')
NOAUTH_ROLES = ['admin', 'member', 'reader']
NOAUTH_SERVICE_ROLES = ['service']
_GLOBAL_REQUEST_ID = re.compile(r'^req-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$')


def header_environ(scope):
    """The request headers in WSGI environ form (HTTP_X_ROLES, ...)."""
    environ = {}
    for name, value in scope['headers']:
        key = 'HTTP_' + name.decode('latin-1').upper().replace('-', '_')
        value = value.decode('latin-1')
        environ[key] = f'{environ[key]},{value}' if key in environ else value
    return environ


def _ids(scope, environ):
    request_id = scope['steward.request_id']
    inbound = environ.get('HTTP_X_OPENSTACK_REQUEST_ID')
    global_id = inbound if inbound and _GLOBAL_REQUEST_ID.match(inbound) else None
    return request_id, global_id


def _set_current(ctx):
    if ctx is not None:
        ctx.update_store()
    else:
        # oslo.context offers no way to clear the thread's context; without this a
        # pooled thread would keep printing a finished request's id.
        oslo_context._request_store.context = None


@contextlib.contextmanager
def current_context(ctx):
    """Make ``ctx`` the calling thread's current context for the block (oslo.log's
    context formatter reads it), then put back what was there. Handlers run in a
    shared thread pool: each request sets its own and leaves nothing behind."""
    previous = oslo_context.get_current()
    _set_current(ctx)
    try:
        yield ctx
    finally:
        _set_current(previous)


def _detached(make):
    """``make()``, leaving no context current in this thread: the event loop's,
    which serves every request in flight, so none of them may be its context.
    oslo.context adopts a new context as current when the thread has none (even
    with overwrite=False), and the loop's thread may still hold one a service
    made at start-up: either would put a wrong request id on the loop's lines."""
    try:
        return make()
    finally:
        _set_current(None)


def context_from_environ(environ, request_id, global_request_id=None):
    """A context from identity headers (set by the client under noauth, by
    auth_token under keystone)."""
    roles = [r.strip() for r in environ.get('HTTP_X_ROLES', '').split(',') if r.strip()]
    return _detached(lambda: steward_context.RequestContext.from_environ(
        environ, roles=roles, is_admin='admin' in {r.lower() for r in roles},
        request_id=request_id, global_request_id=global_request_id, overwrite=False))


def noauth_context(scope):
    environ = header_environ(scope)
    request_id, global_id = _ids(scope, environ)
    if any(h in environ for h in IDENTITY_HEADERS):
        return context_from_environ(environ, request_id, global_id)
    return _detached(lambda: steward_context.RequestContext(
        roles=list(NOAUTH_ROLES), service_roles=list(NOAUTH_SERVICE_ROLES),
        is_admin=True, request_id=request_id, global_request_id=global_id,
        auth_token=environ.get('HTTP_X_AUTH_TOKEN'), overwrite=False))


class NoAuthMiddleware:
    """ASGI: the noauth context (see the module docstring).

    Every caller is an admin here, so the listener must be loopback unless
    [api] allow_insecure_noauth says otherwise. ``steward api`` and ``steward
    serve`` refuse a routable listener at start (steward/cmd/checks.py); under a
    hosting server (steward.wsgi.api) the listener is only known per request,
    as the scope's ``server``: a request that reached a routable address is
    refused with 403 ``cyb.auth.noauth_not_loopback``, logged once per address.
    Each address is judged once."""

    def __init__(self, app):
        self.app = app
        self.exposure_allowed = CONF.api.allow_insecure_noauth
        self.loopback = set()
        self.refused = set()

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'http':
            if not self.exposure_allowed:
                self._check_listener(scope)
            if not scope.get('steward.public'):
                scope['steward.context'] = noauth_context(scope)
        await self.app(scope, receive, send)

    def _check_listener(self, scope):
        server = scope.get('server')
        # None: a Unix socket, local by nature.
        if server is None or server[0] in self.loopback:
            return
        host = str(server[0])
        try:
            address = ipaddress.ip_address(host.strip('[]').split('%')[0])
        except ValueError:
            # Not an address (an in-process test client's "testserver"): real
            # servers pass the socket's own address.
            self.loopback.add(host)
            return
        if address.is_loopback:
            self.loopback.add(host)
            return
        if host not in self.refused:
            self.refused.add(host)
            LOG.error('auth_strategy = noauth and a request reached the routable '
                      'address %s: refused (set [api] auth_strategy = keystone)', host)
        raise exception.NoauthNotLoopback(address=host)


def _wsgi_environ(scope):
    server = scope.get('server') or ('localhost', 80)
    environ = header_environ(scope)
    environ.update({
        'REQUEST_METHOD': scope['method'],
        'SCRIPT_NAME': scope.get('root_path', ''),
        'PATH_INFO': scope['path'],
        'QUERY_STRING': scope.get('query_string', b'').decode('latin-1'),
        'SERVER_NAME': str(server[0]), 'SERVER_PORT': str(server[1] or 80),
        'SERVER_PROTOCOL': 'HTTP/' + scope.get('http_version', '1.1'),
        'wsgi.url_scheme': scope.get('scheme', 'http'),
        'wsgi.input': io.BytesIO(b''), 'wsgi.errors': io.StringIO(),
        'wsgi.version': (1, 0), 'wsgi.multithread': True,
        'wsgi.multiprocess': False, 'wsgi.run_once': False,
    })
    if 'HTTP_CONTENT_TYPE' in environ:
        environ['CONTENT_TYPE'] = environ.pop('HTTP_CONTENT_TYPE')
    return environ


def _authenticated(environ, start_response):
    """The WSGI 'application' behind auth_token: reaching it means the token
    was accepted; auth_token has then rewritten the identity headers."""
    environ['steward.authenticated'] = True
    start_response('204 No Content', [])
    return []


def service_token_roles():
    """[api] service_token_roles, after one WARNING if [keystone_authtoken]
    service_token_roles was set to something else (it is derived, not read)."""
    from keystonemiddleware import auth_token
    for group, opts in auth_token.list_opts():
        CONF.register_opts(opts, group=group)
    ours = list(CONF.api.service_token_roles)
    theirs = list(CONF.keystone_authtoken.service_token_roles)
    if sorted(theirs) != sorted(ours):
        LOG.warning('[keystone_authtoken] service_token_roles = %s is ignored: the '
                    'roles of a service token are set once, in [api] '
                    'service_token_roles = %s', ','.join(theirs), ','.join(ours))
    return ours


class KeystoneMiddleware:
    """ASGI: validate tokens with keystonemiddleware's auth_token (a WSGI
    middleware), run in a worker thread because it may call Keystone."""

    def __init__(self, app):
        from keystonemiddleware import auth_token
        self.app = app
        # Options come from [keystone_authtoken] of Steward's own CONF, except the
        # roles that make a service token: [api] service_token_roles is the one
        # setting, also used by the handlers (RequestContext.is_service).
        self._auth = auth_token.AuthProtocol(_authenticated, {
            'oslo_config_config': CONF,
            'service_token_roles': ','.join(service_token_roles())})

    def _validate(self, environ):
        reply = {}

        def start_response(status, headers, exc_info=None):
            reply['status'] = int(status.split(' ', 1)[0])
            reply['headers'] = headers

        body = b''.join(self._auth(environ, start_response))
        return reply, body

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http' or scope.get('steward.public'):
            return await self.app(scope, receive, send)
        environ = _wsgi_environ(scope)
        # keystonemiddleware is blocking (a token's first validation is an HTTP
        # call to Keystone): off the event loop, on the loop's default threads.
        reply, body = await asyncio.get_running_loop().run_in_executor(
            None, self._validate, environ)
        if not environ.get('steward.authenticated'):
            status = reply.get('status', 401)
            LOG.info('auth_token refused %s %s (%s) request_id=%s', scope['method'],
                     scope['path'], status, scope['steward.request_id'])
            if status == 401:
                err = exception.NotAuthenticated()
            else:
                err = exception.ServiceUnavailable(service='Identity',
                                                   reason=f'auth_token answered {status}')
            err.headers = [(k, v) for k, v in reply.get('headers', ())
                           if k.lower() == 'www-authenticate']
            raise err
        request_id, global_id = _ids(scope, environ)
        scope['steward.context'] = context_from_environ(environ, request_id, global_id)
        await self.app(scope, receive, send)


def middleware_class():
    """The auth layer of ``[api] auth_strategy``."""
    if CONF.api.auth_strategy == 'keystone':
        return KeystoneMiddleware
    return NoAuthMiddleware

"""The v2 accelerator API as an ASGI application.

``create_app(conductor_api, arqs_api, database, ...)`` returns an ``App``: the route table below
(the whole API in one dict, URL -> {method: handler}; a known URL with another
method answers 405 with ``Allow``), served by a short, fixed pipeline of ASGI
layers (see create_app) that renders every error through ``errors.py``.
"""
import asyncio
from concurrent import futures
import logging
import os
import uuid as uuidlib

from steward.api import auth
from steward.api import cors
from steward.api import errors
from steward.api import healthcheck
from steward.api import microversion
from steward.api import proxy
from steward.api import requestlog
from steward.api.handlers import ApiRequest
from steward.api.handlers import arqs
from steward.api.handlers import attributes
from steward.api.handlers import deployables
from steward.api.handlers import device_profiles
from steward.api.handlers import devices
from steward.api.handlers import root
from steward.common import exception
from steward.conf import CONF

LOG = logging.getLogger(__name__)

# The route table. Paths are matched after normalisation (see ApiMiddleware):
# unversioned paths are served under /v2 and a trailing slash is ignored.
ROUTES = {
    '/': {'GET': root.home},
    '/v2': {'GET': root.v2},
    '/v2/devices': {'GET': devices.list_devices},
    '/v2/devices/{uuid}': {'GET': devices.get_device},
    '/v2/devices/{uuid}/enable': {'POST': devices.enable},
    '/v2/devices/{uuid}/disable': {'POST': devices.disable},
    '/v2/devices/{uuid}/clean': {'POST': devices.clean},
    '/v2/devices/{uuid}/clean_plan': {'GET': devices.clean_plan},
    '/v2/devices/{uuid}/erase_records': {'GET': devices.erase_records},
    '/v2/devices/{uuid}/history': {'GET': devices.history},
    '/v2/deployables': {'GET': deployables.list_deployables},
    '/v2/deployables/{uuid}': {'GET': deployables.get_deployable},
    '/v2/deployables/{uuid}/program': {'PATCH': deployables.program},
    # openstacksdk's path for the same thing (the uuid twice).
    '/v2/deployables/{uuid}/program/{again}': {'PATCH': deployables.program},
    '/v2/attributes': {'GET': attributes.list_attributes,
                       'POST': attributes.create_attribute},
    '/v2/attributes/{uuid}': {'GET': attributes.get_attribute,
                              'DELETE': attributes.delete_attribute},
    '/v2/device_profiles': {'GET': device_profiles.list_profiles,
                            'POST': device_profiles.create_profile,
                            'DELETE': device_profiles.delete_profiles},
    '/v2/device_profiles/{name_or_uuid}': {'GET': device_profiles.get_profile,
                                           'DELETE': device_profiles.delete_profile},
    '/v2/accelerator_requests': {'GET': arqs.list_arqs,
                                 'POST': arqs.create_arqs,
                                 'PATCH': arqs.patch_arqs,
                                 'DELETE': arqs.delete_arqs},
    '/v2/accelerator_requests/{uuid}': {'GET': arqs.get_arq,
                                        'PATCH': arqs.patch_arq,
                                        'DELETE': arqs.delete_arq},
}

# URLs that exist from a microversion on. Below it they answer 404
# (``cyb.request.path_not_found``) as if absent, whatever the method, before any
# policy check: a client cannot tell them from an unknown URL, as in Placement
# and Nova. 406 is kept for a version the API does not serve at all.
SINCE = {
    '/v2/devices/{uuid}/clean': microversion.DEVICE_STATE,
    '/v2/devices/{uuid}/clean_plan': microversion.DEVICE_STATE,
    '/v2/devices/{uuid}/erase_records': microversion.DEVICE_STATE,
    '/v2/devices/{uuid}/history': microversion.DEVICE_HISTORY,
}

PUBLIC_PATHS = frozenset(['/', '/v2'])
# Outside /v2: no microversion, not rewritten to /v2/...
UNVERSIONED_PATHS = frozenset(['/'])
BODY_METHODS = frozenset(['POST', 'PUT', 'PATCH'])


# --- middleware -------------------------------------------------------------------
class ApiMiddleware:
    """Outermost layer (pure ASGI, no per-request objects beyond the scope):

    * gives the request its id (``x-openstack-request-id`` on every answer);
    * normalises the path: ``/devices`` is served as ``/v2/devices``, and a
      trailing slash is dropped (``/v2/`` is ``/v2``);
    * parses the microversion of every /v2 request (406 when unacceptable; a URL
      below the version it appeared in answers 404, see ``SINCE``) and
      puts the version headers on every /v2 answer, errors included;
    * reads the body of a POST/PUT/PATCH, refusing one over ``max_body``
      bytes (``[oslo_middleware] max_request_body_size``) with 413 before it is
      all in memory;
    * turns anything raised below into a JSON error; an unexpected exception is
      logged with its traceback and answered with a clean 500.
    """

    def __init__(self, app, max_body):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http':
            return await self.app(scope, receive, send)
        request_id = f'req-{uuidlib.uuid4()}'
        scope['steward.request_id'] = request_id
        original = scope['path']
        root_path = scope.get('root_path', '')
        path = original[len(root_path):] if root_path and \
            original.startswith(root_path) else original
        path = path.rstrip('/') or '/'
        if path not in UNVERSIONED_PATHS and path != '/v2' and not path.startswith('/v2/'):
            path = '/v2' + path
        scope['steward.original_path'] = original
        scope['path'] = root_path + path if root_path else path
        scope['steward.public'] = path in PUBLIC_PATHS

        extra = [(b'x-openstack-request-id', request_id.encode())]
        error = None
        if path not in UNVERSIONED_PATHS:
            try:
                version = microversion.parse(_version_headers(scope))
            except exception.NotAcceptable as exc:
                version, error = microversion.MIN_VERSION, exc
            scope['steward.version'] = version
            extra += [
                (b'openstack-api-minimum-version', str(microversion.MIN_VERSION).encode()),
                (b'openstack-api-maximum-version', str(microversion.MAX_VERSION).encode()),
                (b'openstack-api-version', microversion.header_value(version).encode()),
                (b'vary', b'OpenStack-API-Version'),
            ]
        started = False
        if error is None and scope['method'] in BODY_METHODS:
            try:
                receive = await _read_body(scope, receive, self.max_body)
            except exception.StewardError as exc:
                error = exc

        async def send_with_headers(message):
            nonlocal started
            if message['type'] == 'http.response.start':
                started = True
                message['headers'] = list(message.get('headers', ())) + extra
            await send(message)

        if error is None:
            try:
                return await self.app(scope, receive, send_with_headers)
            except Exception as exc:  # noqa: BLE001 - the catch-all, by design
                if started:
                    LOG.exception('Error after the response started request_id=%s',
                                  request_id)
                    return
                error = exc
        status, headers, body = errors.unexpected(error, request_id, scope['method'],
                                                  original)
        await send_with_headers({
            'type': 'http.response.start', 'status': status,
            'headers': [(k.encode('latin-1'), v.encode('latin-1')) for k, v in headers]
            + [(b'content-length', str(len(body)).encode())]})
        await send_with_headers({'type': 'http.response.body', 'body': body})


async def _read_body(scope, receive, limit):
    """Read the whole request body into ``scope['steward.body']``; returns a
    ``receive`` that replays it for anything below that reads it again."""
    for name, value in scope['headers']:
        if name == b'content-length' and value.isdigit() and \
                int(value) > limit:
            raise exception.RequestTooLarge(limit=limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message['type'] == 'http.disconnect':
            break
        chunk = message.get('body', b'')
        size += len(chunk)
        if size > limit:
            raise exception.RequestTooLarge(limit=limit)
        chunks.append(chunk)
        if not message.get('more_body'):
            break
    body = b''.join(chunks)
    scope['steward.body'] = body
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {'type': 'http.request', 'body': body, 'more_body': False}
        return await receive()
    return replay


def _version_headers(scope):
    """{lower-case name: value} of the microversion header only (the rest of the
    headers are not needed to pick a version)."""
    values = [v.decode('latin-1') for k, v in scope['headers']
              if k == b'openstack-api-version']
    return {'openstack-api-version': ','.join(values)} if values else {}


# --- routing ----------------------------------------------------------------------
def _api_request(scope, app):
    """The handler's view of the request, built from the scope (the body was
    read, raw, by ApiMiddleware so that JSON errors are ours: no framework
    422s, no pydantic)."""
    host = content_type = None
    for name, value in scope['headers']:
        if name == b'host' and host is None:
            host = value.decode('latin-1')
        elif name == b'content-type' and content_type is None:
            content_type = value.decode('latin-1')
    if host is None:
        server = scope.get('server') or ('localhost', None)
        host = f'{server[0]}:{server[1]}' if server[1] else str(server[0])
    return ApiRequest(
        ctx=scope.get('steward.context'), version=scope.get('steward.version'),
        method=scope['method'], params=scope.get('path_params', {}),
        query=scope.get('query_string', b''),
        body=scope.get('steward.body', b''), conductor=app.conductor, arqs=app.arqs,
        scheme=scope.get('scheme', 'http'), host=host,
        root_path=scope.get('root_path', ''), database=app.database,
        metrics=app.metrics, policy=app.policy, content_type=content_type)


# How many handlers run at once, on SQLite. Its writers are serial (one lock per
# database), and a writer runs ~10 statements, giving the GIL up at each: with
# 40 threads every one of those hand-backs queued behind the other threads'
# Python (one switch interval each), so a 5 ms bind held the write lock for
# ~100 ms and 16 clients got no more done than one. Two threads keep a read going
# beside a write; the event loop still parses every connection meanwhile.
SQLITE_HANDLER_THREADS = 2
# On a database with parallel writers. The same queue on the GIL made 40
# threads (anyio's default) hold a device's row lock for a bind's ~6 round
# trips times every other runnable thread's turn: at 16 clients on two API
# workers, bind p99 618 ms with 40 threads, 107 ms with 4 (bench/production.py,
# PostgreSQL, 2026-11-28, a loaded machine), and more instances per second.
HANDLER_THREADS = 4
# Across the API's worker processes the threads share the host's cores instead:
# four workers of four threads on two cores kept 16 binds in flight, each
# holding its device's share lock through the others' turns on the CPU (bind
# p99 101-110 ms, 100-139 instances/s at 16 clients); two threads each gave
# 118-152 (mean 136.5, p99 61-83 ms), two workers of four 126-147 (mean 138.1).
# bench/production.py, PostgreSQL, 2026-11-28 21:18-21:26 UTC.
HANDLER_THREADS_PER_CORE = 4


def handler_threads(database, workers=1, cores=None):
    """Unset ``[api] handler_threads``: 2 on SQLite; otherwise four per process,
    fewer when the API's workers would run more than HANDLER_THREADS_PER_CORE
    per core of this host (at least one)."""
    if CONF.api.handler_threads:
        return CONF.api.handler_threads
    if database.engine.dialect.name == 'sqlite':
        return SQLITE_HANDLER_THREADS
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    return max(1, min(HANDLER_THREADS, HANDLER_THREADS_PER_CORE * cores // workers))


class Router:
    """The route table as one ASGI app (Placement's way: a dict of paths to
    {method: handler}, no framework router). A path is matched by its segments:
    a template's ``{name}`` segment takes any one segment, as in Placement's
    routes. Unknown path: 404 ``cyb.request.path_not_found``; a known path with
    another method: 405 with ``Allow``; a path below the microversion it appeared
    in (``SINCE``): 404, before any policy check.

    ``app`` is the App whose services (conductor, ARQ operations, database,
    metrics, policy)
    every handler's ApiRequest carries.

    Handlers run in a pool of worker threads (the database layer is synchronous),
    at most ``handler_threads(database, processes)`` at once, with the request's
    context as the thread's current one: every log line names the request id.
    The pool is the app's, made by ``create_app`` and shut down with it."""

    def __init__(self, routes, since, executor, app):
        self.executor = executor
        self.app = app
        self.exact = {}
        self.templates = {}
        for path, methods in routes.items():
            segments = tuple(path.split('/'))
            entry = (methods, since.get(path), ', '.join(sorted(methods)))
            if '{' in path:
                names = tuple((i, seg[1:-1]) for i, seg in enumerate(segments)
                              if seg.startswith('{'))
                literals = tuple((i, seg) for i, seg in enumerate(segments)
                                 if not seg.startswith('{'))
                self.templates.setdefault(len(segments), []).append(
                    (literals, names, entry))
            else:
                self.exact[path] = entry

    def match(self, path):
        """(entry, path params) of ``path``, or (None, None)."""
        entry = self.exact.get(path)
        if entry is not None:
            return entry, {}
        segments = path.split('/')
        for literals, names, entry in self.templates.get(len(segments), ()):
            # A NUL names nothing stored (PostgreSQL refuses it in a query): 404.
            if all(segments[i] == seg for i, seg in literals) and \
                    all(segments[i] and '\x00' not in segments[i] for i, _ in names):
                return entry, {name: segments[i] for i, name in names}
        return None, None

    def _run(self, scope, handler):
        req = _api_request(scope, self.app)
        with auth.current_context(req.ctx):
            return handler(req)

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'lifespan':
            return await self._lifespan(receive, send)
        if scope['type'] != 'http':
            return
        root_path = scope.get('root_path', '')
        path = scope['path'][len(root_path):] if root_path else scope['path']
        entry, params = self.match(path)
        original = scope.get('steward.original_path', scope['path'])
        if entry is None:
            raise exception.PathNotFound(path=original)
        methods, since, allow = entry
        if since is not None and scope['steward.version'] < since:
            raise exception.PathNotFound(path=original)
        handler = methods.get(scope['method'])
        if handler is None:
            err = exception.MethodNotAllowed(method=scope['method'], path=original)
            err.headers = [('allow', allow)]
            raise err
        scope['path_params'] = params
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self.executor, self._run, scope, handler)
        await response(scope, receive, send)

    async def _lifespan(self, receive, send):
        """Servers that speak ASGI lifespan (test clients; Steward's own servers
        run with lifespan off) learn the app has nothing to start."""
        while True:
            message = await receive()
            if message['type'] == 'lifespan.startup':
                await send({'type': 'lifespan.startup.complete'})
            elif message['type'] == 'lifespan.shutdown':
                await send({'type': 'lifespan.shutdown.complete'})
                return


class App:
    """The API as one ASGI application: the services its handlers use, and the
    pipeline built on them by create_app. Nothing of a web framework: the route
    table, the layers and the responses are Steward's own (a framework's
    router, exception and validation layers were a fifth of a request's time on
    the event loop, and none of them was used)."""

    def __init__(self, conductor, arqs, database, metrics, policy, processes=1):
        self.conductor = conductor
        self.arqs = arqs
        self.database = database
        self.metrics = metrics
        self.policy = policy
        self.executor = futures.ThreadPoolExecutor(
            handler_threads(database, processes), thread_name_prefix='steward-api')
        self.router = Router(ROUTES, SINCE, self.executor, self)
        self.checks = []        # /healthcheck's own checks
        self.pipeline = None

    async def __call__(self, scope, receive, send):
        await self.pipeline(scope, receive, send)

    def close(self):
        """Stop the handler and check threads without waiting: a request still
        stuck on an unreachable database must not hold the process's exit up."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        for check in self.checks:
            executor = getattr(check, 'executor', None)
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)


def create_app(conductor_api, arqs_api, database, metrics, policy, transport_url=None,
               processes=1):
    """The API application; ``conductor_api`` is a ConductorAPI, or the
    LocalConductorAPI of a process that holds the conductor (how the API changes
    devices), ``arqs_api`` a steward/arqs/api.py ArqAPI (how it creates, binds,
    unbinds and deletes ARQs: LocalArqAPI or ArqRPCAPI, the composition root's
    choice), ``database`` the Database it reads (and
    writes attributes and device profiles) through, ``metrics`` the process's
    steward.metrics.Metrics, ``policy`` the process's steward.api.policy.Enforcer
    (both built by the composition root, steward/cmd/root.py, whose
    ``api_app()`` calls this), ``transport_url`` the broker the process talks
    to, which /healthcheck checks (None: no broker check), ``processes`` the
    API processes of this host (handler_threads). The pipeline, outermost
    first:

    1. ProxyHeaders: scheme, host and client address from a trusted proxy's
       headers ([oslo_middleware] enable_proxy_headers_parsing, [api]
       trusted_proxies); first, so every layer below sees the client's view.
    2. RequestLog: one INFO line per request, whatever answered it.
    3. Healthcheck: /healthcheck, before authentication and path rewriting.
    4. Cors (only when [cors] allowed_origin is set): answers preflights before
       authentication, and decorates every answer below, errors included.
    5. ApiMiddleware: request id, path normalisation, microversion (406),
       version headers on every answer, the body and its limit (413), and every
       error rendered by errors.py (a StewardError as itself, anything else a
       clean 500). Above authentication so that even an authentication failure
       or a crash leaves with the headers.
    6. auth (NoAuthMiddleware or KeystoneMiddleware, [api] auth_strategy): the
       RequestContext; skipped for the version documents. After 5 because it
       needs the request id and the normalised path.
    7. Router: the route table, the handler in a worker thread.
    """
    app = App(conductor_api, arqs_api, database, metrics, policy, processes)
    app.checks = [healthcheck.DatabaseCheck(database)]
    hosts = healthcheck.broker_hosts(transport_url, CONF)
    if hosts:
        app.checks.append(healthcheck.BrokerCheck(hosts))
    layer = ApiMiddleware(auth.middleware_class()(app.router),
                          CONF.oslo_middleware.max_request_body_size)
    if CONF.cors.allowed_origin:
        layer = cors.Cors(layer, CONF.cors)
    layer = healthcheck.Healthcheck(layer, CONF, app.checks)
    layer = requestlog.RequestLog(layer)
    if CONF.oslo_middleware.enable_proxy_headers_parsing:
        layer = proxy.ProxyHeaders(layer, True, CONF.api.trusted_proxies)
    app.pipeline = layer
    return app

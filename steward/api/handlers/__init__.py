"""Request handlers of the v2 API, one module per resource.

A handler is a plain synchronous function ``handler(req) -> Response`` taking an
``ApiRequest``: the caller's context, the microversion served, path and query
parameters and the raw body, and nothing of the web framework. The route table
in steward/api/app.py maps URLs and methods onto them; the router runs them in its
thread pool because the database layer is synchronous.

Each handler's docstring lists the statuses it answers.
"""
import json
import urllib.parse

from oslo_utils import uuidutils

from steward.common import exception
from steward.conf import CONF

JSON_TYPE = 'application/json'
# The media types upstream Cyborg decodes as JSON (WSME's restjson); it answers
# 415 to any other, as Placement does. A charset, if given, must be UTF-8: the
# only encoding JSON has between systems (RFC 8259 section 8.1).
JSON_MEDIA_TYPES = frozenset({JSON_TYPE, 'text/javascript', 'application/javascript'})
UTF8_NAMES = frozenset({'utf-8', 'utf8'})
# Deeper than any body the API takes (a device profile is four levels). Below the
# decoder's own limit, a deep document would still make the schema validator, the
# RPC serializer or the database driver recurse past Python's limit (a 500).
MAX_BODY_DEPTH = 32


def _refuse_constant(name):
    raise ValueError(f'{name} is not JSON')


def _check_document(document):
    """Refuse a document nested deeper than MAX_BODY_DEPTH, or holding a string
    no database or UTF-8 encoder takes (a lone surrogate from a ``\\ud800``
    escape). Iterative: the check must not recurse itself."""
    todo = [(document, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_BODY_DEPTH:
                raise exception.BodyTooDeep(limit=MAX_BODY_DEPTH)
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key)
                todo.append((item, depth + 1))
        elif isinstance(value, str):
            _check_text(value)


def check_media_type(content_type):
    """Refuse (415) a body whose Content-Type is missing, not JSON, or names
    another charset than UTF-8. ``content_type`` is the raw header value or None."""
    media, _, params = (content_type or '').partition(';')
    media = media.strip().lower()
    if media not in JSON_MEDIA_TYPES:
        raise exception.UnsupportedMediaType(media_type=media or 'none')
    for param in params.split(';'):
        name, _, value = param.partition('=')
        if (name.strip().lower() == 'charset'
                and value.strip().strip('"').lower() not in UTF8_NAMES):
            raise exception.UnsupportedMediaType(media_type=content_type.strip())


def _check_text(text):
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        raise exception.MalformedJSON() from None


class ApiRequest:
    """What a handler sees of a request."""

    __slots__ = ('ctx', 'version', 'method', 'params', 'query', 'body', 'content_type',
                 'conductor', 'arqs', 'database', 'metrics', 'policy', '_scheme',
                 '_host', '_root_path', '_base_url')

    def __init__(self, ctx, version, method, params, query, body, conductor,
                 scheme, host, root_path, database=None, metrics=None, policy=None,
                 content_type=None, arqs=None):
        self.ctx = ctx
        self.version = version
        self.method = method
        self.params = params
        self.query = query          # the raw query string (bytes)
        self.body = body            # bytes
        self.content_type = content_type    # the raw header, or None
        # steward.conductor.rpcapi.ConductorAPI, or the LocalConductorAPI of a
        # process that holds the conductor (steward/conductor/local_api.py)
        self.conductor = conductor
        # steward.arqs.api.ArqAPI: the ARQ operations (create, bind, unbind, delete)
        self.arqs = arqs
        self.database = database    # steward.db.session.Database (reads, profiles)
        self.metrics = metrics      # steward.metrics.Metrics (the bind histogram)
        self.policy = policy        # steward.api.policy.Enforcer
        self._scheme, self._host, self._root_path = scheme, host, root_path
        self._base_url = None

    @property
    def base_url(self):
        """Where clients reach the API, without the version: [api]
        public_endpoint, else the root of the incoming request's URL."""
        if self._base_url is None:
            configured = CONF.api.public_endpoint
            if configured:
                self._base_url = configured.rstrip('/')
            else:
                self._base_url = f'{self._scheme}://{self._host}{self._root_path}'
        return self._base_url

    def json(self):
        """The body as JSON; 400 when it is missing, not JSON (strict: UTF-8, no NaN
        or Infinity, no lone surrogate, no integer of thousands of digits) or nested
        deeper than MAX_BODY_DEPTH; 415 when it is not sent as JSON."""
        if not self.body or not self.body.strip():
            raise exception.SchemaViolation(reason='a JSON request body is required')
        check_media_type(self.content_type)
        try:
            # UTF-8 only (RFC 8259), a BOM tolerated: json.loads would guess
            # UTF-16 and UTF-32 from the bytes.
            document = json.loads(self.body.decode('utf-8-sig'),
                                  parse_constant=_refuse_constant)
        except RecursionError:
            # Deep enough to overflow the decoder itself.
            raise exception.BodyTooDeep(limit=MAX_BODY_DEPTH) from None
        except (ValueError, UnicodeDecodeError):
            raise exception.MalformedJSON() from None
        _check_document(document)
        return document

    def query_args(self, allowed, multi=(), ints=()):
        """{name: value} of the query string. Unknown parameters are refused
        (a typo such as ``?instance_uuid=`` must not silently widen a listing);
        a parameter given twice is refused unless named in ``multi``; those named
        in ``ints`` are converted with int_arg."""
        result = {}
        # Parsed as Starlette's QueryParams does, only by the handlers that read it.
        pairs = urllib.parse.parse_qsl(self.query.decode('latin-1'),
                                       keep_blank_values=True) if self.query else ()
        for name, value in pairs:
            if name not in allowed:
                raise exception.InvalidQuery(
                    reason=f'unknown parameter {name!r}; expected one of '
                           f'{", ".join(sorted(allowed)) or "none"}')
            if name in result and name not in multi:
                raise exception.InvalidQuery(reason=f'parameter {name!r} given twice')
            result[name] = value
        for name in ints:
            if name in result:
                result[name] = int_arg(name, result[name])
        return result


def check_uuid(name, value):
    if not uuidutils.is_uuid_like(value):
        raise exception.InvalidUUID(name=name, value=value)
    return value


def uuid_or_not_found(exc, resource, value):
    """A path segment upstream looks up as it is (no UUID check): anything that
    is not a UUID names nothing, 404 as upstream answers, without a query."""
    if not uuidutils.is_uuid_like(value):
        raise exc(resource=resource, key='uuid', value=value)
    return value


def uuid_list(name, value):
    """A comma-separated list of UUIDs, duplicates dropped, order kept."""
    items = [v.strip() for v in value.split(',') if v.strip()]
    if not items:
        raise exception.InvalidQuery(reason=f'{name} needs at least one UUID')
    for item in items:
        check_uuid(name, item)
    return list(dict.fromkeys(items))


def int_arg(name, value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise exception.InvalidParameter(name=name, value=value,
                                         reason='an integer is expected')


def project_scope(ctx):
    """The project an ARQ query is confined to: None (everything) for admins and
    services, the caller's project otherwise, and a project matching nothing when
    a non-admin caller has none."""
    if ctx.is_admin or ctx.is_service:
        return None
    return ctx.project_id or ''


class Response:
    """A handler's answer, sent as two ASGI messages. No framework response:
    the headers are always the same two, computed once."""

    __slots__ = ('body', 'status_code', 'headers')

    def __init__(self, body=b'', status_code=200, media_type=None):
        self.body = body
        self.status_code = status_code
        # No body on 204/304 means no Content-Length either (RFC 9110 8.6).
        self.headers = [] if status_code in (204, 304) else \
            [(b'content-length', str(len(body)).encode())]
        if media_type is not None:
            self.headers.append((b'content-type', media_type.encode()))

    async def __call__(self, scope, receive, send):
        await send({'type': 'http.response.start', 'status': self.status_code,
                    'headers': self.headers})
        await send({'type': 'http.response.body', 'body': self.body})


def json_response(data, status=200):
    return Response(json.dumps(data).encode(), status_code=status, media_type=JSON_TYPE)


def encoded_response(body, status=200):
    """A JSON answer whose body is encoded already (bytes)."""
    return Response(body, status_code=status, media_type=JSON_TYPE)


def empty(status):
    return Response(status_code=status)

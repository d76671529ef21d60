"""How the CLI reaches the accelerator API: endpoint, authentication, microversion,
and the one place an HTTP error becomes a CLI error.

Options (each also read from the environment, as the openstack client does):

* ``--os-auth-type`` / ``OS_AUTH_TYPE``: any keystoneauth plugin (``none``,
  ``admin_token``, ``password``, ``token``, ``v3password``, ...), with that
  plugin's own ``--os-*`` options and ``OS_*`` variables. When none is named:
  ``OS_AUTH_URL`` set means ``token`` (with ``OS_TOKEN``) or ``password``;
  ``OS_TOKEN`` alone means ``admin_token``; otherwise ``none``, the single-host
  default (noauth). ``clouds.yaml`` is not read: with ``OS_CLOUD`` set and
  nothing else, the command stops with a usage error instead of guessing.
* ``--os-endpoint`` (then ``OS_ACCELERATOR_ENDPOINT_OVERRIDE``, then
  ``OS_ENDPOINT``): the API's URL, for every auth type. Without it, Keystone
  plugins look ``accelerator`` up in the service catalog (``--os-interface``,
  ``--os-region-name``) and endpoint plugins (``none``, ``admin_token``) use
  ``http://127.0.0.1:6666/v2``. ``/v2`` is appended to a URL without it.
* ``--os-accelerator-api-version`` / ``OS_ACCELERATOR_API_VERSION``: the
  microversion; by default the newest the server offers, read from ``GET /v2``
  once per command.
* keystoneauth's session options: ``--insecure``, ``--os-cacert``, ``--timeout``...
"""
import argparse
import os
import re

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from steward.client import errors as cli

DEFAULT_ENDPOINT = 'http://127.0.0.1:6666/v2'
SERVICE_TYPE = 'accelerator'
DEFAULT_TIMEOUT = 60
ENDPOINT_ENV = ('OS_ACCELERATOR_ENDPOINT_OVERRIDE', 'OS_ENDPOINT')
_VERSION = re.compile(r'^(\d+)\.(\d+)$')


# --- options ----------------------------------------------------------------------
def default_auth_type(argv):
    """The auth type named on the line or in the environment, else the one the
    other options imply (see the module docstring)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument('--os-auth-type', '--os-auth-plugin')
    pre.add_argument('--os-auth-url')
    pre.add_argument('--os-token')
    pre.add_argument('--os-password')
    pre.add_argument('--os-cloud')
    pre.add_argument('--os-endpoint')
    seen, _ = pre.parse_known_args(argv)
    named = seen.os_auth_type or os.environ.get('OS_AUTH_TYPE') or \
        os.environ.get('OS_AUTH_PLUGIN')
    if named:
        return named
    auth_url = seen.os_auth_url or os.environ.get('OS_AUTH_URL')
    token = seen.os_token or os.environ.get('OS_TOKEN')
    password = seen.os_password or os.environ.get('OS_PASSWORD')
    if auth_url:
        return 'token' if token and not password else 'password'
    if token:
        return 'admin_token'
    cloud = seen.os_cloud or os.environ.get('OS_CLOUD')
    if cloud and not (seen.os_endpoint or any(os.environ.get(n) for n in ENDPOINT_ENV)):
        # Falling back to noauth on localhost would hide the real problem.
        raise cli.UsageError(
            f'clouds.yaml is not read (OS_CLOUD={cloud}): export the OS_* variables of '
            f'that cloud (OS_AUTH_URL, OS_USERNAME, ...) or give --os-auth-type')
    return 'none'


def _plugin_loader(auth_type):
    try:
        return ks_loading.get_plugin_loader(auth_type)
    except ks_exc.NoMatchingPlugin:
        known = ', '.join(sorted(ks_loading.get_available_plugin_names()))
        raise cli.UsageError(f'unknown --os-auth-type {auth_type!r}; keystoneauth '
                             f'offers: {known}') from None


def connection_parser(argv):
    """The connection options, for ``parse_known_args`` (and as a parent of every
    sub-command, so ``--help`` lists them). Raises UsageError for an unknown
    auth type."""
    auth_type = default_auth_type(argv)
    loader = _plugin_loader(auth_type)
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    group = parser.add_argument_group(
        'connection options',
        'Also read from OS_* environment variables, as the openstack client does. '
        'Default: no authentication against ' + DEFAULT_ENDPOINT + '.')
    group.add_argument('--os-auth-type', '--os-auth-plugin', default=auth_type,
                       metavar='<name>',
                       help='keystoneauth plugin: none, admin_token, password, token, '
                            f'... (env OS_AUTH_TYPE; now: {auth_type})')
    group.add_argument('--os-endpoint', metavar='<url>',
                       help='the accelerator API, e.g. ' + DEFAULT_ENDPOINT + ' (env '
                            'OS_ACCELERATOR_ENDPOINT_OVERRIDE or OS_ENDPOINT; default: '
                            'the service catalog, or ' + DEFAULT_ENDPOINT +
                            ' for auth types none and admin_token)')
    group.add_argument('--os-interface', metavar='<interface>',
                       default=os.environ.get('OS_INTERFACE', 'public'),
                       help='catalog interface: public, internal, admin '
                            '(env OS_INTERFACE; default public)')
    group.add_argument('--os-region-name', metavar='<region>',
                       default=os.environ.get('OS_REGION_NAME'),
                       help='catalog region (env OS_REGION_NAME)')
    group.add_argument('--os-accelerator-api-version', metavar='<version>',
                       default=os.environ.get('OS_ACCELERATOR_API_VERSION'),
                       help='microversion, e.g. 2.3, or latest (env '
                            'OS_ACCELERATOR_API_VERSION; default: the newest the '
                            'server offers)')
    for opt in loader.get_options():
        if opt.dest == 'endpoint':      # --os-endpoint above, for every auth type
            continue
        group.add_argument(*opt.argparse_args, dest='os_' + opt.dest,
                           default=opt.argparse_default, metavar=opt.metavar,
                           help=opt.help)
    ks_loading.register_session_argparse_arguments(parser)
    parser.add_argument('--debug', action='store_true',
                        help='log every HTTP request and show tracebacks')
    for action in parser._actions:
        action.connection_option = True     # kept out of usage lines: cli.HelpFormatter
    return parser


# --- errors -----------------------------------------------------------------------
def exit_code_for_status(status):
    if status == 404:
        return cli.EXIT_NOT_FOUND
    if status in (401, 403):
        return cli.EXIT_NOT_ALLOWED
    return cli.EXIT_API_ERROR


def error_from_response(resp):
    """The CliError for an HTTP error answer: the API's ``error_message`` and
    ``error_code`` (other services' shapes as best we can), status, request id."""
    status = resp.status_code
    message = code = None
    try:
        doc = resp.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        message = doc.get('error_message') or doc.get('faultstring')
        code = doc.get('error_code')
        # Other services' shapes: Keystone {"error": {...}}, Placement
        # {"errors": [...]}, webob {"message", "title"}.
        nested = doc.get('error') or (doc.get('errors') or [None])[0]
        if not message and isinstance(nested, dict):
            message = nested.get('message') or nested.get('detail') or nested.get('title')
            code = code or nested.get('code')
        if not message:
            message = doc.get('title') or doc.get('message')
    if not message:
        text = ' '.join(re.sub(r'<[^>]+>', ' ', resp.text or '').split())
        message = text[:300] or f'{status} {resp.reason or ""}'.strip()
    return cli.CliError(message, exit_code=exit_code_for_status(status),
                        error_code=code, status=status,
                        request_id=resp.headers.get('x-openstack-request-id'))


def _reason(err):
    """The useful end of a connection error ("[Errno 111] Connection refused"),
    not urllib3's nesting of pools and retries."""
    text = str(err)
    found = re.search(r'\[Errno -?\d+\] [^\'")\]]+', text) or \
        re.search(r'\[SSL: [^\]]+\][^\'")(]*', text) or \
        re.search(r'(timed out|certificate verify failed[^\'")]*)', text, re.IGNORECASE)
    return found.group(0).strip() if found else text


def _connection_error(err, where):
    # keystoneauth reports a refused connection to auth_url as DiscoveryFailure.
    if isinstance(err, (ks_exc.ConnectFailure, ks_exc.SSLError, ks_exc.DiscoveryFailure,
                        ks_exc.UnknownConnectionError, ks_exc.RequestTimeout)):
        return cli.CliError(f'cannot reach {where}: {_reason(err)}',
                            exit_code=cli.EXIT_UNREACHABLE)
    if isinstance(err, (ks_exc.EndpointNotFound, ks_exc.EmptyCatalog)):
        return cli.CliError(f'no {SERVICE_TYPE} endpoint in the service catalog '
                            f'({err}); give --os-endpoint',
                            exit_code=cli.EXIT_UNREACHABLE)
    if isinstance(err, ks_exc.MissingRequiredOptions):
        names = ', '.join('--os-' + o.dest.replace('_', '-') for o in err.options)
        return cli.UsageError(f'authentication needs {names} (or the OS_* variables)')
    if isinstance(err, ks_exc.AuthorizationFailure):
        return cli.CliError(f'{where} refused: {err}', exit_code=cli.EXIT_NOT_ALLOWED)
    if isinstance(err, (ks_exc.MissingAuthPlugin, ks_exc.AuthPluginException)):
        return cli.UsageError(f'cannot authenticate: {err}')
    if isinstance(err, ks_exc.HttpError):         # Keystone answered an error
        return cli.CliError(f'Keystone: {err}', exit_code=exit_code_for_status(
            getattr(err, 'http_status', None)), status=getattr(err, 'http_status', None))
    return cli.CliError(f'{where}: {err}')


# --- the client -------------------------------------------------------------------
def versioned(url):
    """``url`` ending in ``/v2`` (the API serves unversioned paths there too, but
    the version document lives at ``/v2``)."""
    url = url.rstrip('/')
    return url if url.endswith('/v2') else url + '/v2'


def parse_version(text, what):
    match = _VERSION.match(text.strip())
    if not match:
        raise cli.UsageError(f'{what} {text!r} is not a version like 2.3')
    return int(match.group(1)), int(match.group(2))


def version_string(version):
    return f'{version[0]}.{version[1]}'


class Client:
    """The accelerator API through a keystoneauth session. Connects on first
    use, so ``--help`` and local usage errors never touch the network."""

    def __init__(self, args):
        self._args = args
        self._session = None
        self._ready = False          # connected and negotiated
        self.endpoint = None
        self.version = None          # (major, minor) served, None: the server minimum
        self.server_versions = None  # (min, max) from GET /v2

    def close(self):
        if self._session is not None:
            self._session.session.close()
            self._session = None

    # connection -----------------------------------------------------------------
    def _endpoint_override(self):
        if self._args.os_endpoint:
            return self._args.os_endpoint
        for name in ENDPOINT_ENV:
            if os.environ.get(name):
                return os.environ[name]
        return None

    def _connect(self):
        self.close()                 # a retry (progress.wait_for) starts afresh
        args = self._args
        loader = _plugin_loader(args.os_auth_type)
        fixed_endpoint = any(o.dest == 'endpoint' for o in loader.get_options())
        override = self._endpoint_override()
        if fixed_endpoint and not override:
            override = DEFAULT_ENDPOINT
        if args.os_auth_type == 'admin_token' and not getattr(args, 'os_token', None):
            raise cli.UsageError('--os-auth-type admin_token needs --os-token '
                                 '(or OS_TOKEN)')

        def option(opt):
            if opt.dest == 'endpoint':
                return override
            return getattr(args, 'os_' + opt.dest, None)

        try:
            auth = loader.load_from_options_getter(option)
        except ks_exc.ClientException as err:
            raise _connection_error(err, 'Keystone') from None
        self._session = ks_loading.load_session_from_argparse_arguments(
            args, auth=auth, timeout=args.timeout or DEFAULT_TIMEOUT,
            app_name='steward')
        if not fixed_endpoint:
            # Authenticate now, so that a Keystone failure is reported as one
            # (not as the accelerator API's).
            keystone = f'Keystone ({getattr(args, "os_auth_url", None) or "auth_url"})'
            try:
                self._session.get_auth_headers()
                found = override or self._session.get_endpoint(
                    service_type=SERVICE_TYPE, interface=args.os_interface,
                    region_name=args.os_region_name)
            except ks_exc.ClientException as err:
                raise _connection_error(err, keystone) from None
            if not found:
                raise cli.CliError(
                    f'no {SERVICE_TYPE} endpoint (interface {args.os_interface}) in the '
                    f'service catalog; give --os-endpoint',
                    exit_code=cli.EXIT_UNREACHABLE)
            override = found
        self.endpoint = versioned(override)
        self.version = self._negotiate()
        self._ready = True

    def _negotiate(self):
        """The microversion to ask for: the one requested, if the server offers
        it, else the server's newest."""
        try:
            doc = self._send('GET', self.endpoint, authenticated=False).json()
        except (cli.CliError, ValueError) as err:
            if getattr(err, 'exit_code', None) == cli.EXIT_UNREACHABLE:
                raise
            # Not this API (a typo, Placement's port, a proxy page): say so, rather
            # than "not found".
            raise cli.CliError(f'no accelerator API at {self.endpoint}: GET answered '
                               f'{err}', exit_code=cli.EXIT_UNREACHABLE) from None
        doc = doc.get('version', doc) if isinstance(doc, dict) else {}
        low, high = doc.get('min_version'), doc.get('max_version')
        wanted = self._args.os_accelerator_api_version
        if not high:      # a server without microversions: serve its default
            if wanted and wanted != 'latest':
                raise cli.UsageError(f'the API at {self.endpoint} has no microversions; '
                                     f'drop --os-accelerator-api-version')
            return None
        low = parse_version(low or high, 'the server minimum')
        high = parse_version(high, 'the server maximum')
        self.server_versions = (low, high)
        if not wanted or wanted.strip().lower() == 'latest':
            return high
        version = parse_version(wanted, '--os-accelerator-api-version')
        if not low <= version <= high:
            raise cli.UsageError(
                f'the API at {self.endpoint} serves microversions {version_string(low)} '
                f'to {version_string(high)}, not {version_string(version)}')
        return version

    # requests -------------------------------------------------------------------
    def _send(self, method, url, params=None, body=None, authenticated=None):
        headers = {'Accept': 'application/json'}
        if self.version is not None:
            headers['OpenStack-API-Version'] = \
                f'{SERVICE_TYPE} {version_string(self.version)}'
        try:
            resp = self._session.request(url, method, params=params, json=body,
                                         headers=headers, raise_exc=False,
                                         authenticated=authenticated)
        except ks_exc.ClientException as err:
            raise _connection_error(err, url) from None
        if resp.status_code >= 400:
            raise error_from_response(resp)
        return resp

    def request(self, method, path, params=None, body=None):
        """The response to ``method`` on ``<endpoint><path>``; any HTTP error
        raises CliError (exit code from the status)."""
        if not self._ready:
            self._connect()
        return self._send(method, self.endpoint + path, params=params, body=body)

    def get(self, path, params=None):
        return self.request('GET', path, params=params).json()

    def post(self, path, body=None):
        resp = self.request('POST', path, body=body)
        return resp.json() if resp.content else None

    def delete(self, path, params=None):
        self.request('DELETE', path, params=params)

    def at_least(self, version_text):
        """Is the negotiated microversion >= ``version_text``?"""
        if not self._ready:
            self._connect()
        wanted = parse_version(version_text, 'version')
        return self.version is not None and self.version >= wanted

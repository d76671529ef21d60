"""HTTP for the plugin's commands: the accelerator endpoint OSC's SDK
connection found (a keystoneauth adapter: authentication, catalog or endpoint
override, TLS options), one microversion per command, and API errors turned into
``steward.osc.cli.CliError`` (so ``steward.osc.progress`` retries what is
transient while waiting)."""
import re

from keystoneauth1 import exceptions as ks_exc

from steward.osc import cli

# The newest microversion the plugin knows (2.8: device health; 2.6: last_error,
# missing, history).
MAX_VERSION = '2.8'
_VERSION = re.compile(r'^(\d+)\.(\d+)$')


def parse_version(text):
    m = _VERSION.match(str(text or '').strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _status_exit(status):
    if status == 404:
        return cli.EXIT_NOT_FOUND
    if status in (401, 403):
        return cli.EXIT_NOT_ALLOWED
    if status == 406:
        return cli.EXIT_USAGE
    return cli.EXIT_API_ERROR


class Client:
    """``requested``: ``2`` (negotiate up to MAX_VERSION) or ``2.N``."""

    def __init__(self, adapter, requested):
        self.adapter = adapter
        self.requested = str(requested)
        self.max_version = parse_version(MAX_VERSION)
        self._version = None

    # --- microversion -------------------------------------------------------
    @property
    def version(self):
        if self._version is None:
            pinned = parse_version(self.requested)
            self._version = pinned or self._negotiate()
        return self._version

    @property
    def version_text(self):
        return '%d.%d' % self.version

    def _negotiate(self):
        doc = self._send('GET', '/', versioned=False) or {}
        if 'version' in doc and isinstance(doc['version'], dict):
            doc = doc['version']
        offered = parse_version(doc.get('max_version')) or (2, 0)
        return min(offered, self.max_version)

    def at_least(self, text):
        return self.version >= parse_version(text)

    def require(self, text, what):
        if not self.at_least(text):
            raise cli.UsageError(
                f'{what} needs accelerator microversion {text}; this command uses '
                f'{self.version_text} (--os-steward-api-version, or the server\'s '
                f'maximum)')

    # --- requests -------------------------------------------------------------
    def get(self, path, params=None):
        return self._send('GET', path, params=params)

    def post(self, path, body=None):
        return self._send('POST', path, json=body)

    def _send(self, method, path, params=None, json=None, versioned=True):
        kwargs = {'raise_exc': False, 'headers': {'Accept': 'application/json'}}
        if versioned:
            kwargs['microversion'] = self.version_text
        if params:
            kwargs['params'] = params
        if json is not None:
            kwargs['json'] = json
        try:
            resp = self.adapter.request(path, method, **kwargs)
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                ks_exc.DiscoveryFailure) as err:
            raise cli.CliError(f'cannot reach the accelerator API: {err}',
                               exit_code=cli.EXIT_UNREACHABLE) from None
        except ks_exc.EndpointNotFound as err:
            raise cli.CliError(f'no accelerator endpoint: {err}',
                               exit_code=cli.EXIT_UNREACHABLE) from None
        if resp.status_code >= 400:
            raise self._error(method, path, resp)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    @staticmethod
    def _error(method, path, resp):
        message, code = None, None
        try:
            body = resp.json()
            message, code = body.get('error_message'), body.get('error_code')
        except ValueError:
            pass
        message = message or f'{method} {path}: {resp.reason or "error"}'
        return cli.CliError(message, exit_code=_status_exit(resp.status_code),
                            error_code=code, status=resp.status_code,
                            request_id=resp.headers.get('x-openstack-request-id'))

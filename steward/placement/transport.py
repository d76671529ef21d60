"""HTTP to Placement: the keystoneauth adapter, one request at a time, Placement's
answers mapped to Steward's exceptions, and the count of what was asked.

Nothing here knows what a resource provider is. The client
(steward/placement/client.py) says which request to make and which statuses it
expects; this module makes it and turns anything else into one exception:

* no answer (refused, timeout, TLS, no endpoint) or 502/503/504:
  ``PlacementUnavailable``, an outage rather than a bug;
* 409 ``placement.concurrent_update``: ``PlacementGenerationConflict``, which the
  client answers by reading again and retrying;
* anything else, and an expected status whose body is not JSON (a proxy's HTML
  page, a truncated body): ``PlacementError``, with ``http_status`` and
  ``placement_code`` set when Placement answered.
"""
import threading

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
import requests

from steward.common import exception
from steward.placement import unix_http

MICROVERSION = '1.39'
# Placement (or the proxy in front of it) cannot serve now: an outage, not a bug.
_UNAVAILABLE = frozenset({502, 503, 504})
_EMBEDDED_TIMEOUT = 30


def build_adapter(conf, endpoint=None, default_timeout=None):
    """A keystoneauth Adapter for Placement at MICROVERSION that never raises on an
    HTTP status: for ``endpoint`` (embedded Placement, noauth2; an ``http+unix://``
    URL is its Steward lane, steward/placement/unix_http.py) or from ``[placement]``."""
    group = 'placement'
    if endpoint:
        # noauth2 accepts exactly the token 'admin'; keystoneauth's 'none' plugin
        # sends 'notused' and gets 403.
        auth = ks_loading.get_plugin_loader('admin_token').load_from_options(
            endpoint=endpoint.rstrip('/'), token='admin')
        http = requests.Session()
        http.trust_env = False   # an http_proxy from the environment must not catch loopback
        _pooled(http)
        if endpoint.startswith(unix_http.SCHEME + '://'):
            unix_http.mount(http, endpoint, POOL_SIZE)
        sess = ks_session.Session(
            auth=auth, session=http,
            timeout=conf[group].timeout or default_timeout or _EMBEDDED_TIMEOUT)
        # noauth2 gives 'admin' only the admin role; POST /reshaper needs the service
        # role, which a real deployment's service user carries.
        return ks_adapter.Adapter(sess, service_type='placement',
                                  default_microversion=MICROVERSION, raise_exc=False,
                                  additional_headers={'X-Roles': 'admin,service'})
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    sess = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    _pooled(sess.session)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=sess, auth=auth, default_microversion=MICROVERSION,
        raise_exc=False)


# Connections kept open to Placement. requests keeps 10 by default; a conductor
# has more requests in flight than that (RPC threads, the first registrations'
# and the tree syncs' parallel writes), and every request past the tenth opened a
# connection and threw it away ("Connection pool is full").
POOL_SIZE = 32


def _pooled(http):
    """``http`` (a requests.Session) keeping POOL_SIZE connections per host."""
    for prefix in ('http://', 'https://'):
        http.mount(prefix, requests.adapters.HTTPAdapter(pool_maxsize=POOL_SIZE))


class PlacementTransport:
    """Requests to one Placement through ``adapter`` (keystoneauth's session and
    its connection pool are thread-safe, and so is this).

    ``stats`` counts them: ``reads`` (GETs), ``writes`` (any other method) and
    ``errors`` (requests that raised); /metrics and the benchmarks read it.
    """

    def __init__(self, adapter):
        self.adapter = adapter
        self.stats = {'reads': 0, 'writes': 0, 'errors': 0}
        self._stats_lock = threading.Lock()

    def _count(self, key):
        with self._stats_lock:
            self.stats[key] += 1

    def call(self, method, path, body=None, ok=(200,), tally=None):
        """One request; the response if its status is in ``ok``, else PlacementError
        (module doc). ``tally``, a one-element list, counts the writes of one
        operation for its caller."""
        call = '%s %s' % (method, path)
        self._count('reads' if method == 'GET' else 'writes')
        if tally is not None and method != 'GET':
            tally[0] += 1
        try:
            resp = self.adapter.request(path, method, json=body, raise_exc=False)
        except ks_exc.ClientException as exc:   # refused, timeout, TLS, no endpoint
            self._count('errors')
            raise exception.PlacementUnavailable(
                call=call, reason=str(exc) or type(exc).__name__) from exc
        if resp.status_code in ok:
            if resp.content or (method == 'GET' and resp.status_code == 200):
                try:
                    resp.json()
                except ValueError:   # a proxy's HTML page, a truncated body
                    self._count('errors')
                    raise exception.PlacementError(
                        call=call, reason='HTTP %d with a non-JSON body: %.200s'
                                          % (resp.status_code, resp.text)) from None
            return resp
        self._count('errors')
        code, detail = error_of(resp)
        cls = exception.PlacementError
        if resp.status_code in _UNAVAILABLE:
            cls = exception.PlacementUnavailable
        elif resp.status_code == 409 and code == 'placement.concurrent_update':
            cls = exception.PlacementGenerationConflict
        err = cls(call=call, reason='HTTP %d: %s' % (resp.status_code, detail))
        err.http_status, err.placement_code = resp.status_code, code
        raise err


def error_of(resp):
    """(Placement error code, one-line detail) of an error response."""
    try:
        err = resp.json()['errors'][0]
        return err.get('code'), ' '.join(str(err.get('detail') or err.get('title')).split())
    except (ValueError, KeyError, IndexError, TypeError):
        return None, ' '.join(resp.text.split())[:500] or resp.reason

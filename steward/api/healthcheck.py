"""``/healthcheck`` as oslo.middleware's healthcheck serves it, for load
balancers (HAProxy's ``option httpchk GET /healthcheck``) and monitoring:

* no authentication, no microversion; ``GET`` answers ``200 OK`` when every check
  passes, ``503`` with the failing checks' reasons otherwise; ``HEAD`` answers
  204 or 503 with no body;
* the body as oslo.middleware writes it: ``text/plain`` (the reasons, one a
  line) unless ``Accept`` prefers ``application/json`` or ``text/html``; with
  ``[healthcheck] detailed`` those carry each check's details (and the
  interpreter's, as oslo.middleware's do);
* the checks: oslo.middleware's backends of ``[healthcheck] backends`` (its
  ``oslo.middleware.healthcheck`` stevedore namespace, e.g. ``disable_by_file``
  with ``disable_by_file_path``: a file an operator touches to take the host out
  of the balancer before maintenance), then Steward's own: the database (one
  ``SELECT 1``) and, when the process has one, the message broker (a TCP
  connection to each of its hosts); each bounded by ``CHECK_TIMEOUT`` and run off
  the event loop, so a dead database makes the check fail fast instead of
  stalling the API's other requests;
* ``[healthcheck] allowed_source_ranges`` and ``ignore_proxied_requests`` as in
  oslo.middleware: a request they exclude goes on to the API (a 404).
"""
import asyncio
import gc
import html
import ipaddress
import json
import platform
import sys

from oslo_middleware.healthcheck import pluginbase
from oslo_utils import timeutils
import stevedore

PATH = '/healthcheck'
NAMESPACE = 'oslo.middleware.healthcheck'
# Seconds one of Steward's checks may take; a balancer polls every few seconds.
CHECK_TIMEOUT = 2.0
OFFERS = ('text/plain', 'text/html', 'application/json')
PROXY_HEADERS = (b'forwarded', b'x-forwarded', b'x-forwarded-proto', b'x-forwarded-host',
                 b'x-forwarded-for', b'x-forwarded-prefix')


class DatabaseCheck:
    """One ``SELECT 1`` on a fresh pool checkout, in threads of its own: a
    database that hangs holds a check thread, never a request handler's."""

    def __init__(self, database):
        from concurrent import futures
        self.database = database
        self.executor = futures.ThreadPoolExecutor(2, thread_name_prefix='steward-health')

    def _select(self):
        self.database.ping()

    async def __call__(self):
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(self.executor, self._select),
                                   CHECK_TIMEOUT)
        except asyncio.TimeoutError:
            return pluginbase.HealthcheckResult(
                False, 'DATABASE UNAVAILABLE',
                f'SELECT 1 got no answer in {CHECK_TIMEOUT} s')
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            return pluginbase.HealthcheckResult(
                False, 'DATABASE UNAVAILABLE', str(exc).split('\n')[0][:200])
        return pluginbase.HealthcheckResult(True, 'OK', 'database: SELECT 1 answered')


class BrokerCheck:
    """Can this process reach its message broker? A TCP connection to each host
    of the transport URL, opened by the event loop (no thread, no AMQP session):
    cheap enough for a balancer's poll, and what fails when the broker is down
    or unreachable. One reachable host is enough (a cluster's clients fail over).
    RabbitMQ logs nothing for a connection that closes before the AMQP
    handshake (an AMQP login would write two INFO lines per poll)."""

    def __init__(self, hosts):
        self.hosts = hosts

    async def _reach(self, host, port):
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                 CHECK_TIMEOUT)
        writer.close()

    async def __call__(self):
        failures = []
        for host, port in self.hosts:
            try:
                await self._reach(host, port)
            except (OSError, asyncio.TimeoutError) as exc:
                failures.append(f'{host}:{port}: {exc or "timed out"}')
            else:
                return pluginbase.HealthcheckResult(
                    True, 'OK', f'message broker: {host}:{port} reachable')
        return pluginbase.HealthcheckResult(False, 'MESSAGE BROKER UNAVAILABLE',
                                            '; '.join(failures))


def broker_hosts(transport_url, conf):
    """(host, port) of each broker in ``transport_url``; none for the in-process
    transport (nothing to reach) or a driver without hosts."""
    if not transport_url or transport_url.startswith('kombu+stewardmem'):
        return []
    import oslo_messaging
    url = oslo_messaging.TransportURL.parse(conf, transport_url)
    default = 5672 if url.transport.startswith(('rabbit', 'amqp', 'kombu')) else None
    return [(h.hostname, h.port or default) for h in url.hosts
            if h.hostname and (h.port or default)]


def _best_offer(scope):
    """oslo.middleware's choice: the offered type the client's Accept ranks
    highest, text/plain when none (never a 406 from a health check)."""
    accept = None
    for name, value in scope['headers']:
        if name == b'accept':
            accept = value.decode('latin-1')
            break
    if not accept:
        return 'text/plain'
    best, best_q = None, 0.0
    for item in accept.split(','):
        media, *params = [p.strip() for p in item.split(';')]
        q = 1.0
        for param in params:
            key, _, val = param.partition('=')
            if key.strip() == 'q':
                try:
                    q = float(val)
                except ValueError:
                    q = 0.0
        for offer in OFFERS:
            if q > best_q and (media == offer or media == '*/*' or
                               (media.endswith('/*') and offer.startswith(media[:-1]))):
                best, best_q = offer, q
    return best or 'text/plain'


def _thread_stacks():
    import traceback
    return [''.join(traceback.format_stack(frame))
            for frame in sys._current_frames().values()]


class Healthcheck:
    """The layer answering ``/healthcheck``; everything else goes to ``app``."""

    def __init__(self, app, conf, checks):
        self.app = app
        self.conf = conf.healthcheck
        self.detailed = self.conf.detailed
        self.sources = tuple(ipaddress.ip_network(r, strict=False)
                             for r in self.conf.allowed_source_ranges)
        self.backends = stevedore.NamedExtensionManager(
            NAMESPACE, self.conf.backends, name_order=True, invoke_on_load=True,
            invoke_args=(conf, {})) if self.conf.backends else ()
        self.checks = checks

    def _excluded(self, scope):
        if self.sources:
            client = scope.get('client')
            try:
                address = ipaddress.ip_address(client[0]) if client else None
            except ValueError:
                address = None
            if address is None or not any(address in r for r in self.sources):
                return True
        if self.conf.ignore_proxied_requests:
            return any(name in PROXY_HEADERS for name, _ in scope['headers'])
        return False

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http' or scope['method'] not in ('GET', 'HEAD') or \
                scope['path'] != scope.get('root_path', '') + PATH or \
                self._excluded(scope):
            return await self.app(scope, receive, send)
        server = scope.get('server')
        port = server[1] if server else None
        results = [ext.obj.healthcheck(port) for ext in self.backends if ext.obj]
        results += [await check() for check in self.checks]
        healthy = all(r.available for r in results)
        if scope['method'] == 'HEAD':
            status, body, media = (204 if healthy else 503), b'', 'text/plain'
        else:
            status = 200 if healthy else 503
            media = _best_offer(scope)
            body = self._render(media, results, healthy).encode()
        headers = [(b'content-type', f'{media}; charset=UTF-8'.encode())]
        if status != 204:
            headers.append((b'content-length', str(len(body)).encode()))
        await send({'type': 'http.response.start', 'status': status, 'headers': headers})
        await send({'type': 'http.response.body', 'body': body})

    def _render(self, media, results, healthy):
        if media == 'application/json':
            if not self.detailed:
                doc = {'reasons': [r.reason for r in results], 'detailed': False}
            else:
                doc = dict(self._details(), reasons=[
                    {'reason': r.reason, 'details': r.details or '',
                     'class': type(r).__name__} for r in results])
            return json.dumps(doc, indent=4, sort_keys=True)
        if media == 'text/html':
            return self._html(results)
        return '\n'.join(r.reason for r in results if r.reason)

    def _details(self):
        return {'detailed': True, 'python_version': sys.version,
                'now': str(timeutils.utcnow()), 'platform': platform.platform(),
                'gc': {'counts': gc.get_count(), 'threshold': gc.get_threshold()},
                'greenthreads': [], 'threads': _thread_stacks()}

    def _html(self, results):
        esc = html.escape
        rows = []
        for r in results:
            if self.detailed:
                rows.append(f'<TR>\n<TD>{esc(type(r).__name__)}</TD>\n'
                            f'<TD>{esc(r.reason)}</TD>\n<TD>{esc(r.details or "")}</TD>'
                            f'\n</TR>')
            else:
                rows.append(f'<TR>\n<TD>{esc(r.reason)}</TD>\n</TR>')
        head = '<TH>\nKind\n</TH>\n<TH>\nReason\n</TH>\n<TH>\nDetails\n</TH>' \
            if self.detailed else '<TH>\nReason\n</TH>'
        status = ''
        if self.detailed:
            d = self._details()
            status = (f'<H1>Server status</H1>\n<B>Current time:</B><PRE>{esc(d["now"])}'
                      f'</PRE>\n<B>Python version:</B><PRE>{esc(d["python_version"])}'
                      f'</PRE>\n<B>Platform:</B><PRE>{esc(d["platform"])}</PRE>\n'
                      f'<HR></HR>\n')
        return ('<HTML>\n<HEAD><TITLE>Healthcheck Status</TITLE></HEAD>\n<BODY>\n'
                f'{status}<H2>Result of {len(results)} checks:</H2>\n'
                '<TABLE bgcolor="#ffffff" border="1">\n<TBODY>\n'
                f'<TR>\n{head}\n</TR>\n' + '\n'.join(rows) +
                '\n</TBODY>\n</TABLE>\n<HR></HR>\n</BODY>\n</HTML>')

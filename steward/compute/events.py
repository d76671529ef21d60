"""The compute side's ``POST /v2.1/os-server-external-events``, served while a boot
waits for its ``accelerator-request-bound`` events.

It answers the way nova-api does: each event gets a ``code`` (200 accepted, 404
the server is not one this process waits for); the response is 200 when every
event was accepted, 207 when some were, 404 when none was. The event name
``accelerator-request-bound`` needs compute microversion 2.82 (400 below), as in
Nova. There is no authentication: it listens on loopback by default
(``[compute] events_listen``), like the Steward API's noauth mode.
"""
import http.server
import json
import logging
import socket
import threading

from oslo_utils import uuidutils

from steward.common import exception
from steward.common import netutils

LOG = logging.getLogger(__name__)

EVENT_NAME = 'accelerator-request-bound'
PATHS = ('/v2.1/os-server-external-events', '/v2/os-server-external-events')
STATUSES = ('completed', 'failed', 'in-progress')
MIN_MICROVERSION = (2, 82)
MAX_MICROVERSION = '2.82'


def parse_listen(value):
    """(host, port) of ``host:port`` / ``[v6]:port``."""
    try:
        return netutils.split_host_port(value)
    except ValueError:
        raise exception.EventListenerFailed(
            listen=value, reason='expected host:port, e.g. 127.0.0.1:8774') from None


def endpoint_for(listen):
    """The Nova endpoint (…/v2.1) that reaches a listener on ``listen``."""
    try:
        host, port = parse_listen(listen)
    except exception.EventListenerFailed as err:
        raise exception.InvalidConfiguration(
            reason=f'[compute] events_listen: {err}') from None
    return netutils.local_url(host, port) + '/v2.1'


def _microversion(headers):
    raw = headers.get('OpenStack-API-Version') or ''
    if raw.lower().startswith('compute '):
        raw = raw[len('compute '):]
    else:
        raw = headers.get('X-OpenStack-Nova-API-Version') or '2.1'
    raw = raw.strip()
    if raw == 'latest':
        raw = MAX_MICROVERSION
    try:
        major, minor = (int(x) for x in raw.split('.'))
    except ValueError:
        return None
    return major, minor


def _validate(body):
    if not isinstance(body, dict) or not isinstance(body.get('events'), list) \
            or not body['events']:
        return 'the body must be {"events": [...]} with at least one event'
    for event in body['events']:
        if not isinstance(event, dict):
            return 'every event must be an object'
        if not isinstance(event.get('name'), str) or not event['name']:
            return 'every event needs a name'
        if not uuidutils.is_uuid_like(event.get('server_uuid')):
            return f"server_uuid {event.get('server_uuid')!r} is not a UUID"
        if event.get('status', 'completed') not in STATUSES:
            return f"status {event.get('status')!r} is not one of {', '.join(STATUSES)}"
        if 'tag' in event and not isinstance(event['tag'], str):
            return 'tag must be a string'
    return None


class EventListener:
    """``expect(instance, tags)`` before the bind, ``wait(instance, timeout)``
    after it. Events may arrive before ``wait`` is called; they are kept."""

    def __init__(self, listen):
        self.listen = listen
        self._host, self._port = parse_listen(listen)
        self._cond = threading.Condition()
        self._waiting = {}              # instance -> {arq uuid: status or None}
        self._server = None
        self._thread = None
        self.received = []              # every event body, for diagnostics

    @property
    def port(self):
        return self._server.server_address[1] if self._server else self._port

    def start(self):
        listener = self

        class Handler(_Handler):
            owner = listener

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ':' in self._host else socket.AF_INET
            daemon_threads = True
        try:
            self._server = Server((self._host, self._port), Handler)
        except OSError as err:
            raise exception.EventListenerFailed(
                listen=self.listen, reason=f'{err.strerror or err} (is another '
                                           f'`steward compute boot` waiting?)') from None
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name='compute-events', daemon=True)
        self._thread.start()
        LOG.debug('Serving os-server-external-events on %s', self.listen)
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def expect(self, instance_uuid, tags):
        with self._cond:
            self._waiting[instance_uuid] = {t: None for t in tags}

    def exit_early(self, instance_uuid, tags):
        """Stop waiting for ``tags`` (ARQs found resolved: Nova's exit_wait_early)."""
        with self._cond:
            waiting = self._waiting.get(instance_uuid, {})
            for tag in tags:
                waiting.pop(tag, None)
            self._cond.notify_all()

    def forget(self, instance_uuid):
        with self._cond:
            self._waiting.pop(instance_uuid, None)

    def wait(self, instance_uuid, timeout):
        """{arq uuid: 'completed'|'failed'} once every expected tag has an event;
        BindTimeout naming the missing ones after ``timeout`` seconds."""
        with self._cond:
            waiting = self._waiting[instance_uuid]
            done = self._cond.wait_for(lambda: all(waiting.values()), timeout=timeout)
            if not done:
                missing = sorted(t for t, s in waiting.items() if s is None)
                raise exception.BindTimeout(instance=instance_uuid, timeout=timeout,
                                            missing=', '.join(missing))
            return dict(waiting)

    def _accept(self, event):
        """The per-event code, recording the status of an awaited event."""
        with self._cond:
            waiting = self._waiting.get(event['server_uuid'])
            if waiting is None:
                return 404
            status = event.get('status', 'completed')
            tag = event.get('tag')
            if event['name'] == EVENT_NAME and tag in waiting and status != 'in-progress':
                waiting[tag] = status
                self._cond.notify_all()
            return 200


class _Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection. A kept-alive connection would outlive
    # this listener (its handler thread keeps serving it) and feed the next boot's
    # events to a listener that no longer waits for them.
    owner = None
    protocol_version = 'HTTP/1.0'

    def _reply(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, kind, message):
        self._reply(status, {kind: {'code': status, 'message': message}})

    def do_GET(self):
        if self.path.rstrip('/') == '/v2.1':
            return self._reply(200, {'version': {
                'id': 'v2.1', 'status': 'CURRENT', 'version': MAX_MICROVERSION,
                'min_version': '2.1', 'links': []}})
        self._error(404, 'itemNotFound', 'Not found')

    def do_POST(self):
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        if self.path.split('?', 1)[0] not in PATHS:
            return self._error(404, 'itemNotFound', 'Not found')
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error(400, 'badRequest', 'Malformed request body')
        problem = _validate(body)
        if problem:
            return self._error(400, 'badRequest', f'Invalid input for field/attribute '
                                                  f'events: {problem}')
        version = _microversion(self.headers)
        if version is None:
            return self._error(400, 'badRequest', 'Invalid compute microversion')
        if version < MIN_MICROVERSION and any(
                e['name'] == EVENT_NAME for e in body['events']):
            return self._error(400, 'badRequest', f'{EVENT_NAME} needs compute '
                                                  f'microversion 2.82 or later')
        self.owner.received.append(body)
        results = []
        for event in body['events']:
            code = self.owner._accept(event)
            LOG.info('Event %s status=%s server=%s tag=%s -> %d', event['name'],
                     event.get('status', 'completed'), event['server_uuid'],
                     event.get('tag'), code)
            results.append(dict(event, code=code))
        codes = {r['code'] for r in results}
        if codes == {200}:
            return self._reply(200, {'events': results})
        if 200 not in codes:
            return self._error(404, 'itemNotFound', 'No instances found for any event')
        self._reply(207, {'events': results})

    def log_message(self, fmt, *args):
        LOG.debug('events listener: ' + fmt, *args)

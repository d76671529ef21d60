"""accelerator-request-bound events against a listening HTTP server."""
import http.server
import json
import threading

import pytest

from steward.conductor import nova


class Handler(http.server.BaseHTTPRequestHandler):
    replies = []
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.seen.append((self.path, self.headers.get('OpenStack-API-Version'), body))
        status, reply = self.replies.pop(0)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def nova_server(conf):
    Handler.replies, Handler.seen = [], []
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', f'http://127.0.0.1:{srv.server_address[1]}/v2.1',
                      group='nova')
    conf.set_override('event_retry_delay', 0.05, group='nova')
    yield srv
    srv.shutdown()
    conf.clear_override('auth_type', group='nova')
    conf.clear_override('endpoint_override', group='nova')


EVENTS = [('i-1', 'a-1', 'completed'), ('i-1', 'a-2', 'completed')]


def test_one_post_with_all_events(nova_server, conf):
    Handler.replies = [(200, {'events': []})]
    assert nova.NovaNotifier(conf).notify(EVENTS).result(10) is True
    (path, version, body), = Handler.seen
    assert (path, version) == ('/v2.1/os-server-external-events', 'compute 2.82')
    assert body == {'events': [
        {'name': 'accelerator-request-bound', 'server_uuid': 'i-1', 'tag': 'a-1',
         'status': 'completed'},
        {'name': 'accelerator-request-bound', 'server_uuid': 'i-1', 'tag': 'a-2',
         'status': 'completed'}]}


def test_all_422_is_sent_once_more(nova_server, conf):
    Handler.replies = [(207, {'events': [{'code': 422}, {'code': 422}]}),
                       (200, {'events': []})]
    assert nova.NovaNotifier(conf).notify(EVENTS).result(10) is True
    assert len(Handler.seen) == 2


def test_nova_error_does_not_raise(nova_server, conf):
    Handler.replies = [(500, {'error': 'boom'})]
    assert nova.NovaNotifier(conf).notify(EVENTS).result(10) is False


def test_unconfigured_nova_is_skipped(conf):
    assert nova.NovaNotifier(conf).notify(EVENTS) is None


def test_nothing_listening_is_a_warning_not_an_error(conf, caplog):
    import socket
    with socket.socket() as s:                       # a port nobody listens on
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', f'http://127.0.0.1:{port}/v2.1', group='nova')
    try:
        with caplog.at_level('WARNING'):
            assert nova.NovaNotifier(conf).notify(EVENTS).result(10) is False
    finally:
        conf.clear_override('auth_type', group='nova')
        conf.clear_override('endpoint_override', group='nova')
    assert [r.levelname for r in caplog.records if 'not delivered' in r.getMessage()] \
        == ['WARNING']

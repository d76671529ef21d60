"""accelerator-request-bound events against a listening HTTP server."""
import contextlib
import http.server
import json
import threading
import time

import pytest

from steward.arqs import nova_events
from tests.fixtures import http_double


class Handler(http_double.JsonHandler):
    replies = []
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.seen.append((self.path, self.headers.get('OpenStack-API-Version'), body))
        status, reply = self.replies.pop(0)
        self._send(status, reply)


@contextlib.contextmanager
def _nova_at(conf, port):
    """[nova] pointed at http://127.0.0.1:``port``/v2.1, no authentication, for the
    block."""
    conf.set_override('auth_type', 'none', group='nova')
    conf.set_override('endpoint_override', f'http://127.0.0.1:{port}/v2.1', group='nova')
    try:
        yield
    finally:
        conf.clear_override('auth_type', group='nova')
        conf.clear_override('endpoint_override', group='nova')


@pytest.fixture
def nova_server(conf):
    Handler.replies, Handler.seen = [], []
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    conf.set_override('event_retry_delay', 0.05, group='nova')
    with _nova_at(conf, srv.server_address[1]):
        yield srv
        srv.shutdown()


EVENTS = [('i-1', 'a-1', 'completed'), ('i-1', 'a-2', 'completed')]


def test_one_post_with_all_events(nova_server, conf):
    Handler.replies = [(200, {'events': []})]
    assert nova_events.NovaNotifier(conf).notify(EVENTS).result(10) is True
    (path, version, body), = Handler.seen
    assert (path, version) == ('/v2.1/os-server-external-events', 'compute 2.82')
    assert body == {'events': [
        {'name': 'accelerator-request-bound', 'server_uuid': 'i-1', 'tag': 'a-1',
         'status': 'completed'},
        {'name': 'accelerator-request-bound', 'server_uuid': 'i-1', 'tag': 'a-2',
         'status': 'completed'}]}


def test_all_422_is_not_sent_again(nova_server, conf):
    """Nova drops events for an instance without a host (207, per-event 422) and
    never needs a copy (steward/arqs/nova_events.py): one POST, even after what was
    the retry delay (still set, 0.05 s, by the fixture: deprecated and ignored)."""
    Handler.replies = [(207, {'events': [{'code': 422}, {'code': 422}]}),
                       (200, {'events': []})]
    assert nova_events.NovaNotifier(conf).notify(EVENTS).result(10) is True
    time.sleep(0.5)
    assert len(Handler.seen) == 1 and len(Handler.replies) == 1


def test_nova_error_does_not_raise(nova_server, conf):
    Handler.replies = [(500, {'error': 'boom'})]
    assert nova_events.NovaNotifier(conf).notify(EVENTS).result(10) is False


def test_unconfigured_nova_costs_nothing(conf, caplog):
    """No [nova]: one INFO line when the notifier is built, then nothing per bind."""
    with caplog.at_level('DEBUG', logger='steward.arqs.nova_events'):
        notifier = nova_events.NovaNotifier(conf)
        started = len(caplog.records)
        assert all(notifier.notify(EVENTS) is None for _ in range(50))
    assert [r.levelname for r in caplog.records[:started]] == ['INFO']
    assert 'events are off' in caplog.records[0].getMessage()
    assert len(caplog.records) == started and notifier.sent == 0


def _closed_port():
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_a_nova_that_comes_back_gets_its_events(conf, caplog):
    """Connection refused at first (Nova restarting): keystoneauth retries with a
    backoff, and the events are delivered once something listens on the port."""
    port = _closed_port()
    Handler.replies, Handler.seen = [(200, {'events': []})], []
    with _nova_at(conf, port):
        notifier = nova_events.NovaNotifier(conf)
        with caplog.at_level('WARNING', logger='keystoneauth'):
            future = notifier.notify(EVENTS)
            deadline = time.monotonic() + 10
            # keystoneauth's own line for the first refused attempt
            while not any('Retrying in' in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline and not future.done()
                time.sleep(0.01)
        srv = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            assert future.result(20) is True
        finally:
            srv.shutdown()
            srv.server_close()
    assert len(Handler.seen) == 1


def test_nothing_listening_is_a_warning_not_an_error(conf, caplog):
    port = _closed_port()
    conf.set_override('event_connect_attempts', 2, group='nova')
    with _nova_at(conf, port), caplog.at_level('WARNING'):
        assert nova_events.NovaNotifier(conf).notify(EVENTS).result(10) is False
    assert [r.levelname for r in caplog.records if 'not delivered' in r.getMessage()] \
        == ['WARNING']
    assert not any(r.exc_info for r in caplog.records)
    assert 'after 2 attempt(s) (ConnectFailure)' in caplog.records[-1].getMessage()


def test_keystoneauth_connect_retries_takes_precedence(conf, caplog):
    """``[nova] connect_retries`` (keystoneauth's adapter option), when set, is the
    number of retries; event_connect_attempts is only its default."""
    port = _closed_port()
    conf.set_override('event_connect_attempts', 4, group='nova')
    conf.set_override('connect_retries', 0, group='nova')
    try:
        with _nova_at(conf, port), caplog.at_level('WARNING'):
            assert nova_events.NovaNotifier(conf).notify(EVENTS).result(10) is False
    finally:
        conf.clear_override('connect_retries', group='nova')
    assert not any('Retrying in' in r.getMessage() for r in caplog.records)
    assert 'after 1 attempt(s) (ConnectFailure)' in caplog.records[-1].getMessage()


class HeldHandler(Handler):
    """Holds each POST until the test lets it go (``gate``), counting arrivals."""
    gate = threading.Semaphore(0)
    arrived = threading.Semaphore(0)

    def do_POST(self):
        self.arrived.release()
        assert self.gate.acquire(timeout=60)
        super().do_POST()


@contextlib.contextmanager
def _held_nova(conf, posts):
    """A Nova that holds each POST until the test lets it go (HeldHandler) and
    answers ``posts`` of them, with [nova] pointed at it; yields a notifier."""
    HeldHandler.replies = [(200, {'events': []})] * posts
    HeldHandler.seen = []
    HeldHandler.gate, HeldHandler.arrived = threading.Semaphore(0), threading.Semaphore(0)
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), HeldHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with _nova_at(conf, srv.server_address[1]):
            yield nova_events.NovaNotifier(conf)
    finally:
        srv.shutdown()
        srv.server_close()


def test_binds_completed_while_a_post_is_under_way_share_the_next_post(conf):
    """Each ARQ's event is sent once; the binds that complete while Nova answers
    a POST go together in the next one, not one POST each."""
    with _held_nova(conf, posts=2) as notifier:
        first = notifier.notify([('i-0', 'a-0', 'completed')])
        assert HeldHandler.arrived.acquire(timeout=60)   # the first POST is held
        later = [notifier.notify([(f'i-{n}', f'a-{n}', 'completed')])
                 for n in range(1, 6)]
        HeldHandler.gate.release()
        assert first.result(60) is True
        assert HeldHandler.arrived.acquire(timeout=60)
        HeldHandler.gate.release()
        assert all(f.result(60) is True for f in later)
    tags = [[e['tag'] for e in body['events']] for _, _, body in HeldHandler.seen]
    assert tags == [['a-0'], [f'a-{n}' for n in range(1, 6)]]
    assert notifier.sent == 2


def test_a_post_carries_whole_binds_up_to_its_limit(conf, monkeypatch):
    """A backlog larger than MAX_EVENTS is sent in several POSTs, never splitting
    a bind's events."""
    monkeypatch.setattr(nova_events, 'MAX_EVENTS', 3)
    notifier = nova_events.NovaNotifier(conf)
    for n in range(4):
        notifier._pending.append(([(f'i-{n}', f'a-{n}-{k}', 'completed')
                                   for k in range(2)], None))
    sizes = []
    while notifier._pending:
        sizes.append([len(events) for events, _ in notifier._take()])
    assert sizes == [[2], [2], [2], [2]]
    notifier._pending.append(([('i', 'big', 'completed')] * 5, None))
    assert [len(e) for e, _ in notifier._take()] == [5]


def test_the_backlog_while_nova_is_away_is_bounded(conf, monkeypatch, caplog):
    """Binds made while Nova holds the POSTs: the events waiting never exceed
    MAX_PENDING; the oldest binds' are dropped (their futures say False, one
    WARNING), the newest are sent once Nova answers again. Nova 34 needs none
    of the events to boot (test_compute_boot: every event dropped)."""
    monkeypatch.setattr(nova_events, 'MAX_PENDING', 50)
    with _held_nova(conf, posts=10) as notifier:
        first = notifier.notify([('i-0', 'a-0', 'completed')])
        assert HeldHandler.arrived.acquire(timeout=60)   # Nova holds it
        later = [notifier.notify([(f'i-{n}', f'a-{n}', 'completed')])
                 for n in range(1, 201)]
        assert notifier._queued == 50 == len(notifier._pending)
        assert notifier.dropped == 150
        assert [f.result(0) for f in later[:150]] == [False] * 150
        for _ in range(10):
            HeldHandler.gate.release()
        assert first.result(60) is True
        assert all(f.result(60) is True for f in later[150:])
    sent = [e['tag'] for _, _, body in HeldHandler.seen for e in body['events']]
    assert sent == ['a-0'] + [f'a-{n}' for n in range(151, 201)]
    assert sum('the oldest are dropped' in r.getMessage() for r in caplog.records) == 1

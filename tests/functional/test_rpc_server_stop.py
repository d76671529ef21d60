"""An RPC server stopped while callers are busy (a conductor or an agent stopped by
SIGTERM, as in a rolling upgrade): steward.common.rpc.stop_server on a real
RabbitMQ, with a second server on the same topic. Every call is answered, the
ones sent during the stop by the other server; none is lost to the stopping one
(oslo.messaging alone acknowledges the calls its connection's heartbeat thread
reads after the poll loop ended, and runs none of them)."""
import collections
import threading
import time

import pytest

from steward.common import context
from steward.common import rpc
from tests.fixtures.stack import wait_for
from tests.multihost import rabbit as rabbit_mod

TOPIC = 'steward-stop-test'
CALLERS = 8
#: Calls each caller has answered before the stop, and again after it.
CALLS = 20
#: A lost call is answered by nothing: its caller fails when this runs out. Far
#: above any answer here (milliseconds), so that only a lost call reaches it.
CALL_TIMEOUT = 60


@pytest.fixture
def rabbit(tmp_path):
    with rabbit_mod.running(tmp_path / 'rabbit') as server:
        yield server


class Echo:
    def __init__(self, name):
        self.name = name

    def echo(self, ctx):
        time.sleep(0.005)   # a call in progress at the stop, as a report would be
        return self.name


def test_calls_sent_while_a_server_stops_go_to_the_other_one(rabbit, conf):
    conf.set_override('transport_url', rabbit.url())
    transports = [rpc.Transport() for _ in range(3)]
    stopping, staying, caller = transports
    servers = {'a': stopping.start_server(TOPIC, 'a', [Echo('a')]),
               'b': staying.start_server(TOPIC, 'b', [Echo('b')])}
    try:
        wait_for(lambda: rabbit.consumers(TOPIC) == 2, 'both servers on the queue')
        client = caller.client(TOPIC, '1.0').prepare(timeout=CALL_TIMEOUT)
        answered = [collections.Counter() for _ in range(CALLERS)]
        failures, done = [], threading.Event()

        def calls(mine):
            ctx = context.get_admin_context()
            while not done.is_set():
                try:
                    mine[client.call(ctx, 'echo')] += 1
                except Exception as err:  # noqa: BLE001 - what the test reports
                    failures.append(err)
                    return

        threads = [threading.Thread(target=calls, args=(c,)) for c in answered]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: failures or all(c['a'] >= CALLS and c['b'] >= CALLS
                                             for c in answered),
                     'calls to both servers', timeout=CALL_TIMEOUT * 2)
            assert not failures
            fanout = [q for q in rabbit.queues() if q.startswith(f'{TOPIC}_fanout_')]
            assert len(fanout) == 2     # one a server, deleted when it closes
            rpc.stop_server(servers.pop('a'))
            # The stopping server's consumers have left the queues: nothing more
            # is delivered to it. Its queue of its own stays for its next start,
            # its fanout queue is gone.
            assert rabbit.consumers(TOPIC) == 1
            assert rabbit.consumers(f'{TOPIC}.a') == 0
            assert f'{TOPIC}.a' in rabbit.queues()
            assert rabbit.consumers(f'{TOPIC}.b') == 1
            assert len([q for q in rabbit.queues() if q in fanout]) == 1
            before = [c['b'] for c in answered]
            wait_for(lambda: failures or all(c['b'] >= n + CALLS
                                             for c, n in zip(answered, before)),
                     'calls answered after the stop', timeout=CALL_TIMEOUT * 2)
        finally:
            done.set()
            for t in threads:
                t.join()
        assert failures == []
    finally:
        for srv in servers.values():
            rpc.stop_server(srv)
        for t in transports:
            t.cleanup()

"""steward/connection_share.py: the slots the arbiter shares with its workers,
a worker's count of its connections, and the answer that moves one."""
import asyncio
import os

from steward import connection_share


def test_slots_are_claimed_released_and_reused():
    table = connection_share.ShareTable(3)
    assert [table.claim() for _ in range(4)] == [0, 1, 2, None]
    table.release(1)
    table.release(None)                 # a worker that got no slot
    assert table.claim() == 1
    assert list(table.counts) == [0, 0, 0]


def test_a_forked_worker_writes_what_the_arbiter_and_the_others_read():
    table = connection_share.ShareTable(4)
    mine, other = table.claim(), table.claim()
    pid = os.fork()
    if pid == 0:                        # the worker: its own slot only
        table.counts[other] = 7
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert table.least_of_others(mine) == 7
    assert table.least_of_others(other) == 0


def test_a_lone_worker_moves_nothing():
    table = connection_share.ShareTable(2)
    conns = connection_share.WorkerConnections(table, table.claim())
    for n in range(10):
        conns.add(_Protocol(n))
    assert table.least_of_others(0) is None
    assert not conns.close_one(('127.0.0.1', 1))


class _Protocol:
    def __init__(self, port):
        self.client = ('127.0.0.1', port)


def test_the_count_is_published_and_a_worker_two_above_moves_one_at_a_time():
    table = connection_share.ShareTable(2)
    conns = connection_share.WorkerConnections(table, table.claim())
    other = table.claim()
    protocols = [_Protocol(n) for n in range(5)]
    for p in protocols:
        conns.add(p)
    assert table.counts[0] == 5
    table.counts[other] = 4
    assert not conns.close_one(protocols[0].client)     # 5 against 4: even enough
    table.counts[other] = 2
    assert conns.close_one(protocols[0].client)         # 5 against 2
    assert conns.close_one(protocols[0].client)         # told already: still told
    # One is on its way out: 4 against 2 still moves one more, then 3 against 2 not.
    assert conns.close_one(protocols[1].client)
    assert not conns.close_one(protocols[2].client)
    conns.discard(protocols[0])
    conns.remove(protocols[1])
    assert table.counts[0] == 3
    assert not conns.close_one(protocols[2].client)
    assert not conns.close_one(None)                    # no client address: stays


def _answer(app, client):
    sent = []

    async def inner(scope, receive, send):
        await send({'type': 'http.response.start', 'status': 200,
                    'headers': [(b'content-type', b'application/json')]})
        await send({'type': 'http.response.body', 'body': b'{}'})

    async def send(message):
        sent.append(message)

    scope = {'type': 'http', 'client': client}
    asyncio.run(connection_share.Rebalancing(inner, app)(scope, None, send))
    return sent[0]['headers'], sent[1]


def test_the_answer_carries_connection_close_only_when_one_moves():
    table = connection_share.ShareTable(2)
    conns = connection_share.WorkerConnections(table, table.claim())
    other = table.claim()
    for n in range(4):
        conns.add(_Protocol(n))
    table.counts[other] = 3
    headers, body = _answer(conns, ('127.0.0.1', 0))
    assert headers == [(b'content-type', b'application/json')]
    assert body == {'type': 'http.response.body', 'body': b'{}'}
    table.counts[other] = 0
    headers, _ = _answer(conns, ('127.0.0.1', 0))
    assert headers == [(b'content-type', b'application/json'), (b'connection', b'close')]

"""The API workers' shares of the clients' connections, kept even.

gunicorn's workers accept from one listening socket, and the worker that wakes
first takes every connection waiting. A burst of keep-alive clients (the
nova-compute services of a rack starting together, a benchmark's clients) can
land fifteen connections on one worker and one on the other; that worker's core
is then the API's limit for as long as the connections live (bench/production.py
at 16 clients saw 1/15, 3/13 and 5/11 splits).

Each worker publishes how many connections it holds in a ``ShareTable``, shared
memory the arbiter maps before it forks and hands out one slot per worker. A
worker holding two connections or more above the least loaded worker answers its
next request with ``Connection: close``; the client reconnects (HTTP/1.1 clients
do it on their own), and the new connection goes to whichever worker accepts
first, mostly the one that is not busy. An even spread costs nothing.
"""
import logging
import mmap

LOG = logging.getLogger(__name__)

_FREE = -1


class ShareTable:
    """``size`` slots of connection counts in anonymous shared memory: mapped by
    the arbiter before it forks, so every worker sees the same pages. The
    arbiter claims and frees the slots (single-threaded); each worker writes only
    its own, a 4-byte store that is never seen torn."""

    def __init__(self, size):
        self._map = mmap.mmap(-1, 4 * size)     # MAP_SHARED | MAP_ANONYMOUS
        self.counts = memoryview(self._map).cast('i')
        for slot in range(size):
            self.counts[slot] = _FREE

    def claim(self):
        """A free slot, now counting 0 connections; None when all are taken (more
        workers than slots: that worker takes part in no sharing)."""
        for slot, count in enumerate(self.counts):
            if count == _FREE:
                self.counts[slot] = 0
                return slot
        return None

    def release(self, slot):
        if slot is not None:
            self.counts[slot] = _FREE

    def least_of_others(self, slot):
        """The fewest connections another live worker holds; None when it is alone."""
        others = [c for s, c in enumerate(self.counts) if s != slot and c != _FREE]
        return min(others) if others else None


class WorkerConnections(set):
    """One worker's open connections: uvicorn's ``ServerState.connections`` (each
    HTTP protocol adds itself once connected and discards itself once gone),
    publishing its size to the worker's slot at every change."""

    def __init__(self, table, slot):
        super().__init__()
        self._table, self._slot = table, slot
        self._closing = set()       # clients told to reconnect, still connected

    def _publish(self):
        self._table.counts[self._slot] = len(self)

    def add(self, protocol):
        super().add(protocol)
        self._publish()

    def discard(self, protocol):
        super().discard(protocol)
        self._closing.discard(getattr(protocol, 'client', None))
        self._publish()

    def remove(self, protocol):
        if protocol not in self:
            raise KeyError(protocol)
        self.discard(protocol)

    def close_one(self, client):
        """Whether ``client``'s connection should be closed after this request:
        this worker holds two or more above the least loaded other, not counting
        the connections already told to close."""
        if client is None:
            return False
        if client in self._closing:
            return True
        least = self._table.least_of_others(self._slot)
        if least is None or len(self) - len(self._closing) <= least + 1:
            return False
        self._closing.add(client)
        LOG.debug('Connection from %s closed after its request: %d connections '
                  'here, %d on the least loaded worker', client, len(self), least)
        return True


class Rebalancing:
    """ASGI middleware: ``Connection: close`` on the answer to a request whose
    connection ``connections`` (a WorkerConnections) wants to move."""

    def __init__(self, app, connections):
        self.app = app
        self._connections = connections

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http' or \
                not self._connections.close_one(scope.get('client')):
            return await self.app(scope, receive, send)

        async def send_closing(message):
            if message['type'] == 'http.response.start':
                message = dict(message, headers=[*message.get('headers', ()),
                                                 (b'connection', b'close')])
            await send(message)
        return await self.app(scope, receive, send_closing)

"""What the embedded Placement watches while it generates allocation candidates:
how long one ``GET /allocation_candidates`` has been at it, and whether its client
is still there to read the answer.

Placement generates candidates in one Python loop with no deadline and no look at
the connection: a request that explodes (several one-unit groups over a wide
provider tree, Launchpad bugs 2070257 and 2126751) holds a thread at full CPU for
as long as the product takes, and went on for minutes after its client had given
up. Steward's defaults bound that loop (steward/placement/settings.py); an
operator's file can lift them. So, whatever the bounds:

* ``tracking(app)``, WSGI middleware, records the client's socket (gunicorn's
  ``environ['gunicorn.socket']``) for the thread serving each request;
* ``watched(combinations)`` passes Placement's combinations through, and every
  ``LOOK_EVERY`` seconds looks at that socket: once the client has closed it the
  generation stops (Placement answers with what it found, to nobody) and the
  thread is free again. Past ``LONG`` seconds it logs one WARNING naming the
  options that bound the query.

steward/placement/patches.py (``watch_candidate_generation``) puts ``watched``
around Placement's generator. A combination pruned inside Placement's own product
(``optimize_for_wide_provider_trees``) is not seen here: the look happens between
the combinations that reach Placement's filters.
"""
import logging
import select
import socket
import threading
import time

LOG = logging.getLogger(__name__)

# Seconds between two looks at the client's socket (a poll and a peek: a few
# microseconds), so an abandoned generation stops within about this long.
LOOK_EVERY = 0.5
# Combinations between two readings of the clock: a combination costs Placement
# microseconds, the clock a fraction of that; 256 keeps the watch under 1 % of the
# loop and the look on time.
CLOCK_EVERY = 256
# A generation this long is far outside what Placement answers in when bounded
# (milliseconds per host): one WARNING, naming the bounds.
LONG = 10.0

# The client socket of the request each thread is serving (None outside gunicorn:
# the tests' in-process server, which has no client to lose).
_current = threading.local()


def tracking(app):
    """``app`` with each request's client socket recorded for ``watched``."""
    def wrapped(environ, start_response):
        _current.sock = environ.get('gunicorn.socket')
        try:
            return app(environ, start_response)
        finally:
            _current.sock = None
    return wrapped


def client_gone(sock):
    """Has the peer of ``sock`` closed it? Readable with nothing to read is its
    end of file; readable with data is a client that sent its next request early,
    still there."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLRDHUP)
        if not poller.poll(0):
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b''
    except BlockingIOError:
        return False
    except (OSError, ValueError):     # reset, or closed under us
        return True


def watched(combinations, clock=time.monotonic):
    """Yield ``combinations`` until they end or the client of this thread's
    request is gone."""
    sock = getattr(_current, 'sock', None)
    started = clock()
    look_at = started + LOOK_EVERY
    warned = False
    seen = 0
    for combination in combinations:
        yield combination
        seen += 1
        if seen % CLOCK_EVERY:
            continue
        now = clock()
        if now < look_at:
            continue
        look_at = now + LOOK_EVERY
        if not warned and now - started >= LONG:
            warned = True
            LOG.warning(
                'GET /allocation_candidates has been generating candidates for '
                '%.0f s (%d combinations so far): its request groups multiply over '
                'many providers. [placement] max_allocation_candidates, '
                'allocation_candidates_generation_strategy = breadth-first and '
                '[workarounds] optimize_for_wide_provider_trees bound it ([placement] '
                'embedded_config_file, doc/configuration.md)', now - started, seen)
        if sock is not None and client_gone(sock):
            LOG.warning('GET /allocation_candidates abandoned by its client after '
                        '%.1f s (%d combinations examined): generation stopped',
                        now - started, seen)
            return

"""Write transactions run again, from their start, when the database refused them
as a deadlock.

InnoDB picks a deadlock's victim and rolls its whole transaction back (1213), a
lock wait can time out (1205), and on Galera a transaction whose write set lost
certification to another node's commit is rolled back with the same 1213.
PostgreSQL's deadlock detector does the same. oslo.db's filters turn all of them
into ``DBDeadlock`` (steward/db/session.py); ``on_deadlock`` re-runs the
decorated function, bounded by ``[database] db_max_retries``,
``db_retry_interval``, ``db_inc_retry_interval`` and ``db_max_retry_interval``
(oslo.db's ``wrap_db_retry``; jittered between tries).

What is decorated is a function whose database work is one writer transaction
read and written from scratch (nothing read before it is trusted), with any work
outside the database after its commit: a re-run then repeats the transaction
and nothing else. A decorated function called inside a writer transaction
(another decorated function, or a writer it was called in) is not retried on its
own: the database rolled the whole transaction back, so the outer one re-runs.
"""
import functools
import threading

from oslo_db import api as oslo_db_api

from steward.conf import CONF

# Per thread: how many writer transactions (Database.writer) and retried calls
# are open. Threads are a process's own, so this is no wiring shared between
# databases: it only says "a transaction is already open here".
_open = threading.local()


def depth():
    return getattr(_open, 'depth', 0)


class opened:
    """Counts a writer transaction or a retried call as open in this thread."""

    def __enter__(self):
        _open.depth = depth() + 1

    def __exit__(self, *exc):
        _open.depth -= 1


def on_deadlock(fn):
    counted = _counted(fn)
    # The retrying wrapper per set of option values: built once, not per call
    # (the bind's hot path), and anew when the options change.
    built = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if depth():
            return fn(*args, **kwargs)
        conf = CONF.database
        key = (conf.db_retry_interval, conf.db_max_retries, conf.db_inc_retry_interval,
               conf.db_max_retry_interval)
        retried = built.get(key)
        if retried is None:
            interval, limit, inc, max_interval = key
            retried = built[key] = oslo_db_api.wrap_db_retry(
                retry_interval=interval,
                max_retries=float('inf') if limit < 0 else limit,
                inc_retry_interval=inc, max_retry_interval=max_interval,
                retry_on_deadlock=True)(counted)
        return retried(*args, **kwargs)
    return wrapper


def _counted(fn):
    def call(*args, **kwargs):
        with opened():
            return fn(*args, **kwargs)
    return call

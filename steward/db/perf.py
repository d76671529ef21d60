"""The database layer's speed-ups, in one place: statements built once per shape
(``OneOrMany``), reads without SQLAlchemy's per-value processing (``untyped``),
listings read as records (``records``: plain dicts, not ORM objects) and the
collector paused for a bulk read's burst (``collector_paused``).

Every one of them was measured on the hot path or a ten-thousand-row listing
(bench/arq_lifecycle.py, bench/api_scale.py); the resource modules use them, and
nothing here knows a resource.
"""
import contextlib
import gc
import itertools
import threading

import sqlalchemy as sa



def one_or_many(column, name, one):
    """``column = :name`` when ``one`` value is bound, else ``column IN (:name)``
    (an expanding IN, which SQLAlchemy renders into new SQL at every execution:
    a sixth of such a query's time)."""
    return column == sa.bindparam(name) if one else \
        column.in_(sa.bindparam(name, expanding=True))


def bound(values):
    """(one, the value to bind) for a one_or_many clause on ``values``."""
    values = list(values)
    return (True, values[0]) if len(values) == 1 else (False, values)


class OneOrMany:
    """A statement filtered on a column taking one value of a list, built twice:
    ``column = :name`` for one value (Nova's case: one ARQ, one instance, one
    device) and ``column IN (:name)`` for several (one_or_many).
    ``build(clause)`` makes the statement from the filter clause on ``column``.
    Calling it with the values gives (statement, parameters)."""

    def __init__(self, column, name, build):
        self.name = name
        self.one = build(one_or_many(column, name, True))
        self.many = build(one_or_many(column, name, False))

    def __call__(self, values, **params):
        one, value = bound(values)
        return self.one if one else self.many, dict(params, **{self.name: value})


def untyped(columns):
    """``columns`` selected without SQLAlchemy's per-value result processing (an
    enum check, SQLite's datetime parsing): at ten thousand rows that processing
    cost more than the query. A DateTime column then comes back as SQLite's text
    (``query.timestamp()`` reads both) or PostgreSQL's datetime."""
    return [sa.type_coerce(c, sa.types.NullType()).label(c.key) for c in columns]


_gc_lock = threading.Lock()
_gc_pausers = 0


@contextlib.contextmanager
def collector_paused():
    """Bulk reads make tens of thousands of tuples in a burst; each burst set off
    several collections that walk every long-lived object (the listing caches
    among them) and cost more than the read itself. Paused for the burst only,
    and counted, since requests overlap and the switch is process-wide."""
    global _gc_pausers
    with _gc_lock:
        _gc_pausers += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if not _gc_pausers:
                gc.enable()


def records(session, table, stmt, params=None):
    """The rows of ``stmt`` (every column of ``table``, maybe untyped; with
    ``params``) as records: plain dicts keyed by column, in the table's order. The
    API's listings read these, not ORM objects: loading five thousand devices as
    ORM objects cost twice the whole listing, and a profile by name (Nova's, before
    every boot) four times its read."""
    keys = itertools.repeat([c.key for c in table.c])
    with collector_paused():
        # map() rather than a comprehension: a third less per row.
        return list(map(dict, map(zip, keys, session.execute(stmt, params).all())))


def record(obj):
    """An ORM object's columns as a record, as ``records`` makes them."""
    return {c.key: getattr(obj, c.key) for c in type(obj).__table__.c}

"""The database layer's speed-ups, in one place: statements built once per shape
(``OneOrMany``), reads without SQLAlchemy's per-value processing (``untyped``), the
collector paused for a bulk read's burst (``collector_paused``, ``orm_rows``) and
an ORM object's column values read in one call (``column_values``).

Every one of them was measured on the hot path or a ten-thousand-row listing
(bench/arq_lifecycle.py, bench/api_scale.py); the resource modules use them, and
nothing here knows a resource.
"""
import contextlib
import gc
import operator
import threading

import sqlalchemy as sa



class OneOrMany:
    """A statement filtered on a column taking one value of a list, built twice:
    ``column = :name`` for one value (Nova's case: one ARQ, one instance, one
    device) and ``column IN (:name)`` for several. SQLAlchemy renders an
    expanding IN into new SQL at every execution, a sixth of such a query's time.
    ``build(clause)`` makes the statement from the filter clause on ``column``.
    Calling it with the values gives (statement, parameters)."""

    def __init__(self, column, name, build):
        self.name = name
        self.one = build(column == sa.bindparam(name))
        self.many = build(column.in_(sa.bindparam(name, expanding=True)))

    def __call__(self, values, **params):
        values = list(values)
        if len(values) == 1:
            return self.one, dict(params, **{self.name: values[0]})
        return self.many, dict(params, **{self.name: values})


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


def orm_rows(session, stmt):
    """The ORM objects ``stmt`` selects, made with the collector paused (see
    collector_paused): each object comes with its instance state and dict, and a
    listing of five thousand devices spent two thirds of its time in the
    collections they set off."""
    with collector_paused():
        return session.execute(stmt).scalars().all()


def column_values(model):
    """A function giving an ORM object of ``model`` as the tuple of its column
    values (the mapper's order): a listing's cache key for a row (the whole row,
    so a changed row is another key). Read from the instance's dict in one call,
    five times cheaper than through each attribute; the resource modules load every
    column (none is deferred), so all are there."""
    get = operator.itemgetter(*[a.key for a in sa.inspect(model).column_attrs])
    return lambda obj: get(obj.__dict__)

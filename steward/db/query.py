"""What every resource module's queries share: one row or a not-found error,
exact filters that never hand the driver a value its column cannot hold, and the
wire form of a stored time.

Functions take the session from ``Database.reader()``/``writer()``
(steward/db/session.py); they never commit.
"""
import sqlalchemy as sa



def one(session, stmt, exc, resource, key, value):
    row = session.execute(stmt).unique().scalar_one_or_none()
    if row is None:
        raise exc(resource=resource, key=key, value=value)
    return row


def exact_filters(model, filters, allowed):
    """``model``: a mapped class, or a table's columns (``Table.c``). A value the
    column cannot hold (an unknown enum value, an integer beyond the column's 32
    or 64 bits, a NUL character) matches nothing, as upstream's unknown ``?type=``
    does, instead of reaching the driver: SQLAlchemy's enum type raises LookupError
    on it, SQLite OverflowError beyond 64 bits, PostgreSQL "integer out of range"
    beyond an INTEGER's 32 (the psycopg dialect casts the value to the column's
    type) and refuses NUL in a string."""
    clauses = []
    for key, value in (filters or {}).items():
        if key not in allowed or value is None:
            continue
        column = getattr(model, key)
        clauses.append(column == value if _storable(column, value) else sa.false())
    return clauses


# SQL INTEGER and BIGINT: 4 and 8 bytes on PostgreSQL and MariaDB. SQLite stores
# 8 bytes in either, but the schema is the same on every database.
_INT32 = range(-2 ** 31, 2 ** 31)
_INT64 = range(-2 ** 63, 2 ** 63)


def _storable(column, value):
    kind = column.type
    if isinstance(value, int) and not isinstance(value, bool):
        small = isinstance(kind, sa.Integer) and not isinstance(kind, sa.BigInteger)
        return value in (_INT32 if small else _INT64)
    if isinstance(value, str):
        if '\x00' in value:
            return False
        if isinstance(kind, sa.Enum):
            return value in kind.enums
        if isinstance(kind, sa.Integer):
            return False
    return True


def timestamp(value):
    """Rows store naive UTC; the wire carries ISO 8601 with an explicit offset.
    ``value``: a datetime, or SQLite's stored text of one ('YYYY-MM-DD HH:MM:SS'
    and maybe a fraction) as untyped reads (perf.untyped) return it."""
    if value is None:
        return None
    if isinstance(value, str):
        return f'{value[:10]}T{value[11:19]}+00:00'
    return value.isoformat(timespec='seconds') + '+00:00'

"""Reading an upstream Cyborg database: the schema revisions the import knows,
its tables by column name, and its URL as it may be printed.
"""
import os

import sqlalchemy as sa

from steward.common import exception

# Alembic heads of upstream Cyborg whose schema this import reads.
KNOWN_REVISIONS = {'b47c8f2d1e3a': 'Cyborg 17.0.0 (add device_state)'}
TABLES = ('device_profiles', 'devices', 'controlpath_ids', 'deployables', 'attributes',
          'attach_handles', 'extended_accelerator_requests')
NOT_CARRIED = ('quota_usages', 'reservations')


def read_cyborg(url):
    """{table: [row dict by column name]} and the alembic revision; refuses a
    revision it does not know."""
    try:
        parsed = sa.engine.make_url(url)
        if parsed.get_backend_name() == 'sqlite' and parsed.database not in \
                (None, '', ':memory:') and not os.path.exists(parsed.database):
            # Connecting would create an empty file where Cyborg's database was meant.
            raise exception.CyborgImportError(
                reason=f'no SQLite database at {parsed.database}')
        engine = sa.create_engine(url)
    except (sa.exc.ArgumentError, ImportError) as err:
        raise exception.CyborgImportError(reason=f'--cyborg-connection: {err}')
    try:
        return _read(engine, url)
    except sa.exc.OperationalError as err:
        raise exception.CyborgImportError(
            reason=f'cannot read {url_for_humans(url)}: {err.orig}')
    finally:
        engine.dispose()


def _read(engine, url):
    with engine.connect() as conn:
        meta = sa.MetaData()
        try:
            meta.reflect(conn, only=('alembic_version',) + TABLES)
        except sa.exc.InvalidRequestError as err:
            raise exception.CyborgImportError(
                reason=f'{url_for_humans(url)} is not a Cyborg database: {err}')
        revisions = [r[0] for r in conn.execute(
            sa.select(meta.tables['alembic_version'].c.version_num))]
        if len(revisions) != 1 or revisions[0] not in KNOWN_REVISIONS:
            raise exception.CyborgSchemaUnknown(
                revision=', '.join(revisions) or 'none',
                known=', '.join(f'{r} = {n}' for r, n in KNOWN_REVISIONS.items()))
        data = {}
        for name in TABLES:
            table = meta.tables[name]
            data[name] = [dict(row._mapping) for row in conn.execute(
                sa.select(table).order_by(table.c.id))]
        ignored = {}
        present = sa.inspect(conn).get_table_names()
        for name in NOT_CARRIED:
            if name in present:
                ignored[name] = conn.execute(sa.text(
                    f'SELECT COUNT(*) FROM {name}')).scalar()
        return revisions[0], data, ignored


def url_for_humans(url):
    return sa.engine.make_url(url).render_as_string(hide_password=True)

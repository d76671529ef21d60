from alembic import context

from steward.db import models

config = context.config
target_metadata = models.Base.metadata


def run_migrations_online():
    connectable = config.attributes.get('connection')
    if connectable is None:
        # Alembic's own command line: the configured database.
        from steward.db import session
        connectable = session.Database().engine
    if hasattr(connectable, 'connect'):
        with connectable.connect() as connection:
            _run(connection)
    else:
        _run(connectable)


def _run(connection):
    # Batch mode: SQLite cannot ALTER a column in place; alembic rebuilds the table
    # (upstream's plain ALTERs are why cyborg-dbsync fails on SQLite).
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()

"""deployables.name unique; controlpath_ids.hostname, (hostname, cpid_info) unique

A deployable's name makes its resource provider (uuid3 of the name), so two rows
with one name would share a provider. A control-path id (PCI address) belongs to
at most one device of a host: ``controlpath_ids.hostname`` copies the device's
so the database can say so. A missing device whose slot now holds another drive
gives its id up (``released:<device uuid>``; conductor/report.py does the same
from now on); rows that share one today keep it on the present device, else the
oldest.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""
from alembic import op
import sqlalchemy as sa

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

RELEASED_PREFIX = 'released:'


def _release_shared_cpids(bind):
    rows = bind.execute(sa.text(
        'SELECT c.id, c.hostname, c.cpid_info, d.uuid FROM controlpath_ids c '
        'JOIN devices d ON d.id = c.device_id '
        'ORDER BY c.hostname, c.cpid_info, '
        'CASE WHEN d.missing_since IS NULL THEN 0 ELSE 1 END, c.id')).all()
    seen = set()
    for cpid_id, host, info, device_uuid in rows:
        if (host, info) in seen:
            bind.execute(sa.text('UPDATE controlpath_ids SET cpid_info = :info '
                                 'WHERE id = :id'),
                         {'info': f'{RELEASED_PREFIX}{device_uuid}', 'id': cpid_id})
        seen.add((host, info))


def _refuse_shared_names(bind):
    shared = bind.execute(sa.text(
        'SELECT name FROM deployables GROUP BY name HAVING COUNT(*) > 1')).scalars().all()
    if shared:
        # Renaming one would move it to another resource provider: an operator
        # must decide which row stands for the provider.
        raise RuntimeError(f'deployables share a name (and so a Placement resource '
                           f'provider): {sorted(shared)}; remove the stale rows and '
                           f'run the migration again')


def upgrade():
    bind = op.get_bind()
    _refuse_shared_names(bind)
    # Unique indexes and a column with a default, not constraints added to the
    # tables: on SQLite either would rebuild a table other rows reference, which
    # foreign keys refuse inside the migration's transaction. The default is
    # never used: the model fills hostname in from the device (models.py).
    with op.batch_alter_table('controlpath_ids', schema=None) as batch_op:
        batch_op.add_column(sa.Column('hostname', sa.String(length=255), nullable=False,
                                      server_default=''))
    op.execute('UPDATE controlpath_ids SET hostname = (SELECT devices.hostname FROM '
               'devices WHERE devices.id = controlpath_ids.device_id)')
    _release_shared_cpids(bind)
    with op.batch_alter_table('controlpath_ids', schema=None) as batch_op:
        batch_op.create_index('uniq_controlpath_ids0hostname0cpid_info',
                              ['hostname', 'cpid_info'], unique=True)
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.drop_index('deployables_name_idx')
        batch_op.create_index('uniq_deployables0name', ['name'], unique=True)

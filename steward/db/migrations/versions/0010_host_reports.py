"""host_reports: the digest of each host's last report that was fully applied

A new table only (expand): a service of the release before never reads it, and
an agent's report that finds no row goes through the diff as before. Any
conductor judges a host's quiet report by it, not only the one that took the
host's last change (issue 36).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""
from alembic import op
import sqlalchemy as sa

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade():
    # Tried again after a lock wait on MariaDB (steward/db/migration.py): the
    # table may be there already.
    if sa.inspect(op.get_bind()).has_table('host_reports'):
        return
    op.create_table(
        'host_reports',
        sa.Column('hostname', sa.String(length=255), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=True),
        sa.Column('health_read_at', sa.DateTime(), nullable=True),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('hostname'),
        # MariaDB/MySQL: host names compared byte for byte, as 0008 made the
        # other tables (ignored elsewhere).
        mysql_charset='utf8mb4', mysql_collate='utf8mb4_bin')

"""erase_records.capability_decision

What the controller's Identify data advertised (the optional commands, log pages and
Identify CNS values a cleanup may use), the action chosen, why, and which of them
the cleanup really sent (issue 21). JSON text, like ``capabilities`` and ``details``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""
from alembic import op
import sqlalchemy as sa

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('erase_records', schema=None) as batch_op:
        batch_op.add_column(sa.Column('capability_decision', sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table('erase_records', schema=None) as batch_op:
        batch_op.drop_column('capability_decision')

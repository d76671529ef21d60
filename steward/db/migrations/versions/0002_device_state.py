"""devices.device_state: the lifecycle state of spec 1, nullable until backfilled

Existing rows stay NULL: a device bound today must not be marked available. The
online data migration (steward db online-data-migrations, also run when the
conductor and agent start) decides allocated or available per device.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""
from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column(
            'device_state',
            sa.Enum('available', 'allocated', 'pending_cleaning', 'cleaning', 'error',
                    name='device_state', native_enum=False, length=32),
            nullable=True))
        batch_op.create_index('devices_device_state_idx', ['device_state'], unique=False)

"""devices.last_error, missing_since, identity; device_history

``identity`` (e.g. ``nvme:<serial>:<subsysnqn>``) lets a device keep its row when it
comes back at another PCI address; ``missing_since`` marks a device that vanished
from discovery while not available (kept, still reserved). ``device_history`` is one
row per device state change, keyed by the device uuid without a foreign key on
purpose: like erase_records, the history outlives the device row.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_error', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('missing_since', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('identity', sa.String(length=255), nullable=True))
        batch_op.create_index('devices_identity_idx', ['identity'], unique=False)
    op.create_table(
        'device_history',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('device_uuid', sa.String(length=36), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('event', sa.String(length=64), nullable=False),
        sa.Column('source_state', sa.String(length=32), nullable=True),
        sa.Column('target_state', sa.String(length=32), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('request_id', sa.String(length=255), nullable=True),
        sa.Column('actor', sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid'),
    )
    with op.batch_alter_table('device_history', schema=None) as batch_op:
        batch_op.create_index('device_history_device_uuid_idx', ['device_uuid'],
                              unique=False)

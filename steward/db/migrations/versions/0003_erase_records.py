"""erase_records: one row per device cleanup attempt (the erase certificate)

No foreign key to devices on purpose: the record outlives the device row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""
from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'erase_records',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('device_uuid', sa.String(length=36), nullable=False),
        sa.Column('hostname', sa.String(length=255), nullable=True),
        sa.Column('pci_address', sa.String(length=32), nullable=True),
        sa.Column('trigger', sa.String(length=32), nullable=True),
        sa.Column('status', sa.Enum('running', 'succeeded', 'failed', 'interrupted',
                                    name='erase_status', native_enum=False, length=32),
                  nullable=False),
        sa.Column('action', sa.String(length=32), nullable=True),
        sa.Column('assurance_level', sa.String(length=32), nullable=True),
        sa.Column('serial', sa.String(length=255), nullable=True),
        sa.Column('model', sa.String(length=255), nullable=True),
        sa.Column('firmware', sa.String(length=255), nullable=True),
        sa.Column('capabilities', sa.Text(), nullable=True),
        sa.Column('started_at', sa.DateTime(), nullable=True),
        sa.Column('finished_at', sa.DateTime(), nullable=True),
        sa.Column('phase', sa.String(length=32), nullable=True),
        sa.Column('progress', sa.Float(), nullable=True),
        sa.Column('progress_detail', sa.Text(), nullable=True),
        sa.Column('sstat', sa.Integer(), nullable=True),
        sa.Column('sstat_text', sa.Text(), nullable=True),
        sa.Column('verification', sa.String(length=16), nullable=True),
        sa.Column('verification_detail', sa.Text(), nullable=True),
        sa.Column('error_code', sa.String(length=64), nullable=True),
        sa.Column('error_message', sa.Text(), nullable=True),
        sa.Column('details', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid'),
    )
    with op.batch_alter_table('erase_records', schema=None) as batch_op:
        batch_op.create_index('erase_records_device_uuid_idx', ['device_uuid'],
                              unique=False)
        batch_op.create_index('erase_records_status_idx', ['status'], unique=False)

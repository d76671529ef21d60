"""initial schema: the tables of upstream Cyborg, with an index for every lookup

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('device_profiles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('profile_json', sa.Text(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    sa.UniqueConstraint('uuid')
    )
    op.create_table('devices',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('type', sa.Enum('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD', 'GENERIC', name='device_type', native_enum=False, length=32), nullable=False),
    sa.Column('vendor', sa.String(length=255), nullable=False),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('std_board_info', sa.Text(), nullable=True),
    sa.Column('vendor_board_info', sa.Text(), nullable=True),
    sa.Column('hostname', sa.String(length=255), nullable=False),
    sa.Column('status', sa.Enum('enabled', 'maintaining', name='device_status', native_enum=False, length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.create_index('devices_hostname_idx', ['hostname'], unique=False)
        batch_op.create_index('devices_type_idx', ['type'], unique=False)

    op.create_table('controlpath_ids',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('cpid_type', sa.Enum('PCI', name='cpid_type', native_enum=False, length=32), nullable=False),
    sa.Column('cpid_info', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('controlpath_ids', schema=None) as batch_op:
        batch_op.create_index('controlpath_ids_cpid_info_idx', ['cpid_info'], unique=False)
        batch_op.create_index('controlpath_ids_device_id_idx', ['device_id'], unique=False)

    op.create_table('deployables',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('root_id', sa.Integer(), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('num_accelerators', sa.Integer(), nullable=False),
    sa.Column('device_id', sa.Integer(), nullable=False),
    sa.Column('rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('driver_name', sa.String(length=100), nullable=True),
    sa.Column('bitstream_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['device_id'], ['devices.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['parent_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['root_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.create_index('deployables_device_id_idx', ['device_id'], unique=False)
        batch_op.create_index('deployables_name_idx', ['name'], unique=False)
        batch_op.create_index('deployables_rp_uuid_idx', ['rp_uuid'], unique=False)

    op.create_table('attach_handles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('cpid_id', sa.Integer(), nullable=False),
    sa.Column('in_use', sa.Boolean(), nullable=False),
    sa.Column('attach_type', sa.Enum('PCI', 'MDEV', 'TEST_PCI', name='attach_type', native_enum=False, length=32), nullable=False),
    sa.Column('attach_info', sa.String(length=255), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['cpid_id'], ['controlpath_ids.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('attach_handles', schema=None) as batch_op:
        batch_op.create_index('attach_handles_cpid_id_idx', ['cpid_id'], unique=False)
        batch_op.create_index('attach_handles_deployable_in_use_idx', ['deployable_id', 'in_use'], unique=False)

    op.create_table('attributes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('deployable_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('attributes', schema=None) as batch_op:
        batch_op.create_index('attributes_deployable_id_idx', ['deployable_id'], unique=False)

    op.create_table('extended_accelerator_requests',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('state', sa.Enum('Initial', 'BindStarted', 'Bound', 'BindFailed', 'Unbound', 'UnbindFailed', 'Deleting', name='arq_state', native_enum=False, length=32), nullable=False),
    sa.Column('device_profile_id', sa.Integer(), nullable=False),
    sa.Column('device_profile_group_id', sa.Integer(), nullable=False),
    sa.Column('hostname', sa.String(length=255), nullable=True),
    sa.Column('device_rp_uuid', sa.String(length=36), nullable=True),
    sa.Column('instance_uuid', sa.String(length=36), nullable=True),
    sa.Column('attach_handle_id', sa.Integer(), nullable=True),
    sa.Column('deployable_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['attach_handle_id'], ['attach_handles.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['deployable_id'], ['deployables.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['device_profile_id'], ['device_profiles.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('extended_accelerator_requests', schema=None) as batch_op:
        batch_op.create_index('extarq_attach_handle_id_idx', ['attach_handle_id'], unique=False)
        batch_op.create_index('extarq_deployable_id_idx', ['deployable_id'], unique=False)
        batch_op.create_index('extarq_device_profile_id_idx', ['device_profile_id'], unique=False)
        batch_op.create_index('extarq_instance_uuid_idx', ['instance_uuid'], unique=False)
        batch_op.create_index('extarq_project_id_idx', ['project_id'], unique=False)
        batch_op.create_index('extarq_state_idx', ['state'], unique=False)


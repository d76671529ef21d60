"""devices.imported_from, deployables.discovered_as, attach_handles.discovered_as

What ``steward db import-cyborg`` leaves for the first discovery after a switch
from upstream Cyborg: a device imported and not yet recognised by one of
Steward's agents (``imported_from``: it is kept, as missing, when discovery does
not find it, never deleted); the name Steward's driver reports for a deployable
that keeps Cyborg's name (and so its resource provider); and the attach info
Steward's driver reports for a handle that still holds, while it is in use, the
attach info Cyborg gave the instance.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""
from alembic import op
import sqlalchemy as sa

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('devices', schema=None) as batch_op:
        batch_op.add_column(sa.Column('imported_from', sa.String(length=64),
                                      nullable=True))
    with op.batch_alter_table('deployables', schema=None) as batch_op:
        batch_op.add_column(sa.Column('discovered_as', sa.String(length=255),
                                      nullable=True))
    with op.batch_alter_table('attach_handles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('discovered_as', sa.String(length=255),
                                      nullable=True))

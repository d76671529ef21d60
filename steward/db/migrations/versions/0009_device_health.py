"""devices.health, health_conditions, health_read_at, health_fault

A device's health as its driver last read it (issue 38): the state (ok, warning,
unhealthy), the conditions that held (a JSON list of {code, severity, detail}),
when it was read, and ``health_fault``: the unhealthy conditions that took the
device out of service, kept until an operator brings it back once they have
cleared. Only adds nullable columns, no index (building one can hold writes on a
large table): safe under running services (a service of the release before
ignores them; NULL health is "never read"). ``?health=`` filters the devices table
without an index (a row per device, far fewer than accelerator requests).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""
from alembic import op
import sqlalchemy as sa

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


COLUMNS = (('health', sa.String(length=16)), ('health_conditions', sa.Text()),
           ('health_read_at', sa.DateTime()), ('health_fault', sa.Text()))


def upgrade():
    # Each column its own statement on MariaDB: one that ran out of its lock
    # wait is tried again from there (steward/db/migration.py), past the
    # columns added already.
    present = {c['name'] for c in sa.inspect(op.get_bind()).get_columns('devices')}
    with op.batch_alter_table('devices', schema=None) as batch_op:
        for name, type_ in COLUMNS:
            if name not in present:
                batch_op.add_column(sa.Column(name, type_, nullable=True))

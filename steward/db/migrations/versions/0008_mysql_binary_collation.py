"""MariaDB/MySQL: text compared as on PostgreSQL and SQLite (utf8mb4_bin)

MariaDB's default collation (utf8mb4_general_ci) compares text without case and
trailing spaces: device profile ``DP1`` would clash with ``dp1`` under the unique
name, and Nova's ``?name=dp1`` would find ``DP1``. A binary collation makes every
lookup, filter and unique index byte-for-byte, as on the other two databases. A
no-op elsewhere.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

TABLES = ('device_profiles', 'devices', 'controlpath_ids', 'deployables',
          'attach_handles', 'attributes', 'extended_accelerator_requests',
          'erase_records', 'device_history')


def upgrade():
    if op.get_bind().dialect.name != 'mysql':
        return
    for table in TABLES:
        op.execute(f'ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 '
                   f'COLLATE utf8mb4_bin')

"""steward status upgrade check (oslo.upgradecheck)."""
import sys

from oslo_upgradecheck import upgradecheck

from steward import process
from steward.conf import CONF


class Checks(upgradecheck.UpgradeCommands):
    def __init__(self, database):
        self.database = database

    def _check_schema(self):
        from steward.db import migration
        current, head = migration.current_revision(self.database), migration.head_revision()
        if current != head:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                f'Database schema is at {current}, code expects {head}: run '
                f'"steward db sync".')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_device_state(self):
        from steward.db import data_migrations
        try:
            left = data_migrations.pending(self.database)['backfill_device_state']
        except Exception as err:   # schema too old to even have the column
            return upgradecheck.Result(upgradecheck.Code.FAILURE, str(err).split('\n')[0])
        if left:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                f'{left} device(s) have no device_state: run "steward db '
                f'online-data-migrations".')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Device state backfill', _check_device_state),
    )


def main(argv):
    process.prepare(argv)
    from steward.cmd import root as cmd_root
    root = cmd_root.Root()
    try:
        return Checks(root.database).check()
    finally:
        root.close()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

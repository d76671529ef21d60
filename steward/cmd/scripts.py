"""The console scripts OpenStack services ship beside ``steward`` (pyproject.toml
[project.scripts]): each is the ``steward`` subcommand of the same name, so the
two spellings cannot drift apart.

    steward-api | steward-conductor | steward-agent    steward api | conductor | agent
    steward-manage db ...                              steward db ...
    steward-status upgrade check [--json]              steward status upgrade check
"""
import sys

from steward.cmd import main as steward_main

MANAGE_USAGE = """usage: steward-manage db ACTION [--config-file FILE ...]

  db sync                      apply schema migrations
  db version                   the schema revision of the database
  db online_data_migrations    backfill data (also: online-data-migrations)
  db import-cyborg             take over an upstream Cyborg's database
                               (steward-manage db import-cyborg -h)
"""


def _as(command):
    def run():
        return steward_main.main([command, *sys.argv[1:]])
    run.__name__ = command
    run.__doc__ = f'steward-{command}: the same as steward {command}.'
    return run


api = _as('api')
conductor = _as('conductor')
agent = _as('agent')


def manage():
    """steward-manage: Steward's <service>-manage (db only)."""
    argv = sys.argv[1:]
    if argv[:1] == ['--version']:
        return steward_main.main(argv)
    if argv[:1] in (['-h'], ['--help']):
        print(MANAGE_USAGE)
        return 0
    if argv[:1] != ['db'] or len(argv) < 2 or argv[1].startswith('-'):
        print(MANAGE_USAGE, file=sys.stderr)
        return 2
    return steward_main.main(argv)


status = _as('status')
status.__doc__ = "steward-status: oslo.upgradecheck's upgrade check."

"""The command line of `steward db import-cyborg` (the import is
steward/cyborg_import/)."""
import argparse
import sys

from steward.common import exception

USAGE = """steward db import-cyborg --cyborg-connection URL [--dry-run]
    [--merge keep-steward] [--config-file FILE ...]"""
DESCRIPTION = """Reads an upstream Cyborg database (SQLAlchemy URL, e.g.
mysql+pymysql://cyborg:PASS@db/cyborg) and writes Steward's ([database] connection),
adopting Cyborg's resource providers in the Placement [placement] names. Stop
cyborg-api, cyborg-conductor and every cyborg-agent first.
See doc/switching-from-cyborg.md."""


def main(argv):
    parser = argparse.ArgumentParser(
        prog='steward db import-cyborg', usage=USAGE, description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--cyborg-connection', required=True,
                        help="Cyborg's [database] connection")
    parser.add_argument('--dry-run', action='store_true',
                        help='print what would be written and every conflict; write '
                             'nothing')
    parser.add_argument('--merge', choices=['keep-steward'],
                        help='into a non-empty Steward database: keep the rows Steward '
                             'has, attach what hangs from them, add the rest')
    args, rest = parser.parse_known_args(argv)
    from steward import process
    from steward.placement import handle
    process.prepare(rest)
    if handle.is_embedded():
        process.fail("[placement] names no Placement service (Steward's embedded one "
                     'would be used): point it at the Placement Cyborg used, whose '
                     'providers the import adopts')
    from steward.cmd import root as command_root
    from steward.cyborg_import import importer
    from steward.cyborg_import import source
    from steward.db import migration
    root = command_root.Root()
    try:
        if migration.current_revision(root.database) != migration.head_revision():
            process.fail("Steward's database is not at the current schema: run "
                         '`steward db sync` first')
        try:
            result = importer.run(root.database, args.cyborg_connection,
                                  dry_run=args.dry_run, merge=args.merge,
                                  placement=root.placement_client(),
                                  fake_devices=fake_driver_devices)
        except exception.StewardError as err:
            if getattr(err, 'result', None) is not None:
                report(err.result, args.dry_run,
                       source.url_for_humans(args.cyborg_connection), failed=True)
            print(f'steward: {err.code}: {err}', file=sys.stderr)
            return 1
        report(result, args.dry_run, source.url_for_humans(args.cyborg_connection))
        return 0
    finally:
        root.close()


def fake_driver_devices(host):
    """What Steward's fake driver reports on ``host`` (the import pairs a Cyborg
    fake deployable's handles with these)."""
    from steward.conf import CONF
    from steward.drivers import fake
    return fake.FakeDriver(CONF, host).discover()


def report(result, dry_run, source, failed=False):
    verb = 'would write' if dry_run else 'wrote'
    if failed:
        verb = 'refused (nothing written); it would have written'
    print(f'Cyborg database {source} at revision {result.revision}')
    for line in result.lines:
        print(f'  {line}')
    for line in result.warnings:
        print(f'  WARNING: {line}')
    written = ', '.join(f'{n} {t}' for t, n in result.written.items()) or 'nothing'
    if result.already_imported:
        written = 'nothing (already imported)'
    print(f'{"Dry run: " if dry_run else ""}{verb} {written}')
    if result.kept:
        print('kept as Steward has them: '
              + ', '.join(f'{n} {t}' for t, n in result.kept.items()))
    adds = sum(1 for line in result.lines if 'add trait OWNER_CYBORG' in line)
    print(f'Placement: {verb} {result.placement_writes if not dry_run else adds} '
          f'provider trait update(s) (OWNER_CYBORG), nothing else')
    for table, n in result.not_carried.items():
        print(f'not carried over: {table} ({n} row(s); Cyborg does not use it)')
    for line in result.conflicts:
        print(f'  CONFLICT: {line}')
    if not result.conflicts:
        print('conflicts: none')

"""``steward-status upgrade check`` (and ``steward status upgrade check``), on
oslo.upgradecheck's own command line: ``--json``, and its exit codes (0 success,
1 a warning, 2 a failure, 255 a check that raised)."""
import os
import sys

from oslo_config import cfg
from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck

from steward import process
from steward.conf import CONF
from steward.conf import cyborg_compat

USAGE = 'usage: steward-status upgrade check [--json] [--config-file FILE ...]'


class Checks(upgradecheck.UpgradeCommands):
    """The checks, each on the configuration and database of this command."""

    def __init__(self):
        self.database = None

    def check(self):
        from steward.cmd import root as cmd_root
        root = cmd_root.Root()
        self.database = root.database
        try:
            return super().check()
        finally:
            root.close()

    def _check_schema(self):
        from steward.db import migration
        try:
            state = migration.schema_state(self.database)
        except Exception as err:   # noqa: BLE001 - a database that cannot be read
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                f'Cannot read the database ([database] connection): '
                f'{str(err).splitlines()[0]}')
        if state.relation == 'older':
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                f'Database schema is at {state.current}, code expects {state.head}: '
                f'run "steward-manage db sync".')
        if state.relation == 'newer':
            # The services of this release run on it (its migrations only add),
            # but this host is behind the one that migrated it.
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                f'Database schema is {state.describe()}. Upgrade this host\'s '
                f'Steward to the release that migrated it.')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_data_migrations(self):
        from steward.db import data_migrations
        try:
            left = data_migrations.pending(self.database)
        except Exception as err:   # noqa: BLE001 - schema too old to have the columns
            return upgradecheck.Result(upgradecheck.Code.FAILURE, str(err).split('\n')[0])
        if left.get('backfill_device_state'):
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                f'{left["backfill_device_state"]} device(s) have no device_state: run '
                f'"steward-manage db online_data_migrations".')
        others = {name: n for name, n in left.items() if n}
        if others:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                ', '.join(f'{name}: {n} row(s)' for name, n in sorted(others.items()))
                + ' still to migrate: run "steward-manage db online_data_migrations".')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_cyborg_options(self):
        found = [f'[{group}] {name} ({why.rstrip(".")})'
                 for group, name, why in ignored_cyborg_options(CONF)]
        if found:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'Upstream Cyborg options Steward ignores are set: '
                + '; '.join(found)
                + '. Remove them (steward/conf/cyborg_compat.py says why each has no '
                  'effect).')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_pool_profiles(self):
        """Issue 52: a pool is one provider, so several one-unit groups of its
        resource class under ``group_policy=isolate`` (each group from another
        provider) can no longer land on one host's pool; one group of N can."""
        from steward.db import attributes as attribute_db
        from steward.db import device_profiles as profile_db
        try:
            with self.database.reader() as s:
                pooled = attribute_db.pooled_resource_classes(s)
                profiles = profile_db.device_profile_records(s) if pooled else []
        except Exception as err:   # noqa: BLE001 - the schema check fails it
            return upgradecheck.Result(upgradecheck.Code.SUCCESS,
                                       f'Not checked: {str(err).splitlines()[0]}')
        found = []
        for record in profiles:
            for rc, n in sorted(split_groups(profile_db.device_profile_groups(record),
                                             pooled).items()):
                found.append(f'{record["name"]} ({n} one-unit groups of {rc}: write '
                             f'[{{"resources:{rc}": "{n}"}}] instead)')
        if found:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'Device profiles that cannot land on one pool when the flavor asks '
                'group_policy=isolate: ' + '; '.join(found)
                + '. See doc/drivers/pci.md, "Pools".')
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_schema),
        ('Online data migrations', _check_data_migrations),
        ('Policy File JSON to YAML Migration',
         (common_checks.check_policy_json, {'conf': CONF})),
        ('Cyborg options Steward ignores', _check_cyborg_options),
        ('Profiles split across pools', _check_pool_profiles),
    )


def split_groups(groups, pooled):
    """{resource class: how many groups ask one unit of it, when several do} of a
    profile's ``groups``, for the pooled resource classes."""
    counts = {}
    for group in groups:
        asked = {k.split(':', 1)[1]: v for k, v in group.items()
                 if k.startswith('resources:')}
        if len(asked) == 1:
            ((rc, n),) = asked.items()
            if rc in pooled and str(n).strip() == '1':
                counts[rc] = counts.get(rc, 0) + 1
    return {rc: n for rc, n in counts.items() if n > 1}


def loaded_config_files(conf):
    """The files the configuration was read from: --config-file (or the default
    files found) and every *.conf of --config-dir (the last one given, which is
    all oslo.config keeps), in oslo.config's order."""
    files = list(conf.config_file or [])
    directories = conf.config_dir or []
    for directory in [directories] if isinstance(directories, str) else directories:
        if os.path.isdir(directory):
            files += sorted(os.path.join(directory, f) for f in os.listdir(directory)
                            if f.endswith('.conf'))
    return files


def ignored_cyborg_options(conf):
    """(group, option, why) of every option of upstream Cyborg's that Steward
    ignores and a loaded configuration file sets."""
    found = {}
    for path in loaded_config_files(conf):
        sections = {}
        cfg.ConfigParser(path, sections).parse()
        for group, values in sections.items():
            for name in values:
                why = cyborg_compat.ignored(group, name)
                if why is not None:
                    found[(group, name)] = why
    return [(group, name, why) for (group, name), why in sorted(found.items())]


def _subcommand_last(argv):
    # argparse reads oslo.config's options (--config-file) only before the
    # subcommand, while operators write them after it too, as for `steward db`.
    at = argv.index('upgrade') if 'upgrade' in argv else -1
    if at < 0 or argv[at + 1:at + 2] != ['check']:
        process.fail(USAGE, 2)
    rest = argv[:at] + argv[at + 2:]
    json = ['--json'] if '--json' in rest else []
    return [a for a in rest if a != '--json'] + ['upgrade', 'check'] + json


def main(argv=None):
    argv = _subcommand_last(list(sys.argv[1:] if argv is None else argv))
    upgradecheck.register_cli_options(CONF, Checks())
    # oslo.upgradecheck's check() reads the global it sets in its own main().
    upgradecheck.CONF = CONF
    try:
        process.prepare(argv)
    except cfg.Error as err:
        process.fail(f'configuration: {err}', 2)
    return upgradecheck.run(CONF)


if __name__ == '__main__':
    sys.exit(main())

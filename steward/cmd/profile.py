"""``steward profile create|list|show|delete``: device profiles through the API.

``create NAME --group KEY=VALUE[,KEY=VALUE...]``: one ``--group`` is one request
group of the profile (as ``openstack accelerator device profile create`` takes
them); repeat ``--group`` for several. Keys are the API's
(``resources:FPGA=1``, ``trait:CUSTOM_X=required``, ``accel:...``); the API
checks them. Exit codes: steward/client/__init__.py (doc/cli.md).
"""
import argparse
import uuid as uuidlib

from steward import client as cli
from steward.client import output

LIST_COLUMNS = ('uuid', 'name', 'groups', 'description')
FIELDS = ('uuid', 'name', 'description', 'groups', 'created_at', 'updated_at', 'links')


def group_arg(text):
    """argparse ``type=``: ``k1=v1,k2=v2`` -> {k1: v1, k2: v2}."""
    group = {}
    for item in text.split(','):
        key, sep, value = (p.strip() for p in item.partition('='))
        if not sep or not key or not value:
            raise argparse.ArgumentTypeError(
                f'{item.strip()!r} in {text!r} is not KEY=VALUE (a group is '
                f'KEY=VALUE[,KEY=VALUE...])')
        if key in group:
            raise argparse.ArgumentTypeError(f'{key} appears twice in group {text!r}')
        group[key] = value
    return group


def _is_uuid(text):
    try:
        uuidlib.UUID(text)
    except ValueError:
        return False
    return True


def find(client, name_or_uuid):
    """The profile with that UUID or name."""
    if _is_uuid(name_or_uuid):
        return client.get(f'/device_profiles/{name_or_uuid}')['device_profile']
    if client.at_least('2.2'):
        return client.get(f'/device_profiles/{name_or_uuid}')['device_profile']
    found = client.get('/device_profiles',
                       params={'name': name_or_uuid})['device_profiles']
    if not found:
        raise cli.NotFound(f'no device profile is called {name_or_uuid!r}')
    return found[0]


def cmd_create(client, args):
    output.check_columns(args, FIELDS)
    profile = {'name': args.name, 'groups': args.groups}
    if args.description is not None:
        profile['description'] = args.description
    created = client.post('/device_profiles', body=[profile])
    output.print_object(args, created)


def cmd_list(client, args):
    params = {'name': ','.join(args.names)} if args.names else None
    found = client.get('/device_profiles', params=params)['device_profiles']
    output.print_list(args, found, LIST_COLUMNS, FIELDS)


def cmd_show(client, args):
    output.print_object(args, find(client, args.name_or_uuid))


def cmd_delete(client, args):
    def one(key):
        client.delete(f'/device_profiles/{key}')
    return cli.for_each(args.names_or_uuids, one, 'device profiles (delete)')


def _name(text):
    # Commas would make the API read a list of names (DELETE /device_profiles/a,b).
    if not text or ',' in text or '/' in text:
        raise argparse.ArgumentTypeError(f'{text!r} is not a device profile name or UUID')
    return text


def build_parser(parents):
    parser = argparse.ArgumentParser(prog='steward profile',
                                     description='Device profiles (through the API).')
    sub = parser.add_subparsers(dest='action', required=True, metavar='ACTION')
    p = cli.add_action(sub, 'create', parents, cmd_create,
                       help='create a device profile (admin)')
    p.add_argument('name', metavar='NAME', help='letters, digits, - and _')
    p.add_argument('--group', dest='groups', action='append', type=group_arg,
                   required=True, metavar='KEY=VALUE[,KEY=VALUE...]',
                   help='one request group, e.g. '
                        'resources:FPGA=1,trait:CUSTOM_X=required; repeat for several '
                        'groups')
    p.add_argument('--description', metavar='TEXT')
    output.add_arguments(p)

    p = cli.add_action(sub, 'list', parents, cmd_list, help='list device profiles')
    p.add_argument('--name', dest='names', action='append', type=_name, metavar='NAME',
                   help='only this profile (repeat for several)')
    output.add_arguments(p)

    p = cli.add_action(sub, 'show', parents, cmd_show, help='show one device profile')
    p.add_argument('name_or_uuid', type=_name, metavar='NAME_OR_UUID')
    output.add_arguments(p)

    p = cli.add_action(sub, 'delete', parents, cmd_delete,
                       help='delete device profiles no ARQ uses (admin)')
    p.add_argument('names_or_uuids', nargs='+', type=_name, metavar='NAME_OR_UUID')
    return parser


def main(argv):
    return cli.run(build_parser, argv)


if __name__ == '__main__':
    import sys
    sys.exit(main(sys.argv[1:]))

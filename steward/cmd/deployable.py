"""``steward deployable list|show``: deployables (a device's schedulable parts,
one Placement resource provider each) through the API. Exit codes:
steward/client/__init__.py (doc/cli.md)."""
import argparse

from steward import client as cli
from steward.client import output

LIST_COLUMNS = ('uuid', 'name', 'num_accelerators', 'device_id', 'driver_name',
                'rp_uuid')
FIELDS = ('uuid', 'parent_id', 'root_id', 'name', 'num_accelerators', 'device_id',
          'attributes_list', 'rp_uuid', 'driver_name', 'bitstream_id', 'created_at',
          'updated_at', 'links')


def cmd_list(client, args):
    params = {'name': args.name, 'driver_name': args.driver, 'device_id': args.device_id,
              'rp_uuid': args.rp_uuid}
    found = client.get('/deployables',
                       params={k: v for k, v in params.items() if v is not None})
    output.print_list(args, found['deployables'], LIST_COLUMNS, FIELDS)


def cmd_show(client, args):
    output.print_object(args, client.get(f'/deployables/{args.uuid}'))


def build_parser(parents):
    parser = argparse.ArgumentParser(
        prog='steward deployable',
        description='Deployables: the schedulable parts of devices (through the API).')
    sub = parser.add_subparsers(dest='action', required=True, metavar='ACTION')
    p = cli.add_action(sub, 'list', parents, cmd_list, help='list deployables',
                       description='List deployables; the options filter (exact match).')
    p.add_argument('--name', help='deployable name')
    p.add_argument('--driver', help='driver name, e.g. fake, pci, nvme')
    p.add_argument('--device-id', type=int, metavar='ID',
                   help='the device_id shown by this list')
    p.add_argument('--rp-uuid', type=cli.uuid_arg, metavar='UUID',
                   help='its Placement resource provider')
    output.add_arguments(p)

    p = cli.add_action(sub, 'show', parents, cmd_show, help='show one deployable')
    p.add_argument('uuid', type=cli.uuid_arg, metavar='UUID')
    output.add_arguments(p)
    return parser


def main(argv):
    return cli.run(build_parser, argv)


if __name__ == '__main__':
    import sys
    sys.exit(main(sys.argv[1:]))

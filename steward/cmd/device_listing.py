"""``steward device list|show|enable|disable``: devices through the API.

``main(argv)`` takes the action first (``['list', '-f', 'json']``);
steward/cmd/device.py hands these four actions over to it. Exit codes:
steward/client/__init__.py (doc/cli.md).

From microversion 2.6 ``list`` has a ``missing`` column and ``show`` (as a table)
is followed by the device's history, oldest first; ``-f json|yaml|value`` print
the API's device object only, as for every other resource.
"""
import argparse

from steward import client as cli
from steward.client import output

ACTIONS = ('list', 'show', 'enable', 'disable')
LIST_COLUMNS = ('uuid', 'type', 'vendor', 'model', 'hostname', 'status', 'device_state',
                'missing')
FIELDS = ('uuid', 'type', 'vendor', 'model', 'std_board_info', 'vendor_board_info',
          'hostname', 'status', 'device_state', 'last_error', 'missing', 'missing_since',
          'created_at', 'updated_at', 'links')
HISTORY = '2.6'
HISTORY_COLUMNS = ('created_at', 'event', 'source_state', 'target_state', 'actor',
                   'reason', 'request_id')
# --option: the API's exact-match filter of the same name.
FILTERS = ('type', 'vendor', 'model', 'hostname', 'status')
STATUSES = ('enabled', 'maintaining')


def cmd_list(client, args):
    params = {name: getattr(args, name) for name in FILTERS
              if getattr(args, name) is not None}
    devices = client.get('/devices', params=params)['devices']
    output.print_list(args, devices, LIST_COLUMNS, FIELDS)


def cmd_show(client, args):
    output.print_object(args, client.get(f'/devices/{args.uuid}'))
    if args.format == 'table' and not args.columns and client.at_least(HISTORY):
        history = client.get(f'/devices/{args.uuid}/history')['history']
        print(f'\nhistory of device {args.uuid} (oldest first):')
        output.print_list(args, history, HISTORY_COLUMNS)


def _set_status(client, args, action, status):
    done = []

    def one(uuid):
        client.post(f'/devices/{uuid}/{action}')
        done.append(uuid)
    code = cli.for_each(args.uuids, one, f'devices ({action})')
    # Printed once all are done: a reader that goes away early stops nothing.
    for uuid in done:
        print(f'device {uuid}: {status}')
    return code


def cmd_enable(client, args):
    return _set_status(client, args, 'enable', 'enabled')


def cmd_disable(client, args):
    return _set_status(client, args, 'disable', 'maintaining')


def build_parser(parents):
    parser = argparse.ArgumentParser(
        prog='steward device', description='Accelerator devices (through the API).')
    sub = parser.add_subparsers(dest='action', required=True, metavar='ACTION')
    p = cli.add_action(sub, 'list', parents, cmd_list, help='list devices',
                       description='List devices; the options filter (exact match).')
    p.add_argument('--type', help='FPGA, GPU, PCI, NVME, ...')
    p.add_argument('--vendor', help='vendor id, e.g. 0x10de')
    p.add_argument('--model', help='model (product id)')
    p.add_argument('--hostname', help='compute host')
    p.add_argument('--status', choices=STATUSES,
                   help='enabled, or maintaining (disabled by an operator)')
    output.add_arguments(p)

    p = cli.add_action(sub, 'show', parents, cmd_show, help='show one device')
    p.add_argument('uuid', type=cli.uuid_arg, metavar='UUID')
    output.add_arguments(p)

    p = cli.add_action(sub, 'enable', parents, cmd_enable,
                       help='let devices be allocated again (status enabled; admin)')
    p.add_argument('uuids', nargs='+', type=cli.uuid_arg, metavar='UUID')

    p = cli.add_action(sub, 'disable', parents, cmd_disable,
                       help='stop new allocations of devices (status maintaining: '
                            'their Placement inventory is reserved; admin)')
    p.add_argument('uuids', nargs='+', type=cli.uuid_arg, metavar='UUID')
    return parser


def main(argv):
    return cli.run(build_parser, argv)


if __name__ == '__main__':
    import sys
    sys.exit(main(sys.argv[1:]))

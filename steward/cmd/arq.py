"""``steward arq list|show``: accelerator requests (ARQs) through the API.

Nova creates, binds and deletes ARQs; operators look at them. ``show --wait``
waits until the ARQ's binding is resolved: exit 0 when it is Bound, 1 when it
ended in another state (BindFailed, Deleting). Exit codes:
steward/client/__init__.py (doc/cli.md).
"""
import argparse

from steward import client as cli
from steward.client import output
from steward.client import progress

LIST_COLUMNS = ('uuid', 'state', 'device_profile_name', 'hostname', 'instance_uuid',
                'attach_handle_type')
FIELDS = ('uuid', 'state', 'device_profile_name', 'device_profile_group_id',
          'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
          'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info',
          'created_at', 'updated_at', 'links')
# The states in which a binding is resolved: steward.common.states.ARQ_RESOLVED
# (not imported: it pulls in SQLAlchemy; tests/functional/test_cli.py keeps
# the two equal).
RESOLVED = ('Bound', 'BindFailed', 'Deleting')
SUCCESS = 'Bound'


def cmd_list(client, args):
    params = {'instance': args.instance} if args.instance else None
    output.print_list(args, client.get('/accelerator_requests', params=params)['arqs'],
                      LIST_COLUMNS, FIELDS)


def _describe(arq):
    where = f"instance {arq['instance_uuid']}" if arq.get('instance_uuid') else \
        'not bound to an instance yet'
    return progress.Progress(arq['state'], None, where)


def cmd_show(client, args):
    path = f'/accelerator_requests/{args.uuid}'
    if args.wait_timeout is not None and not args.wait:
        raise cli.UsageError('--wait-timeout goes with --wait')
    if not args.wait:
        arq = client.get(path)
    else:
        arq = progress.wait_for(
            lambda: client.get(path), lambda a: a['state'] in RESOLVED, _describe,
            what=f'the binding of ARQ {args.uuid}',
            resume=f'steward arq show {args.uuid} --wait',
            timeout=args.wait_timeout)
    output.print_object(args, arq)
    if args.wait and arq['state'] != SUCCESS:
        raise cli.CliError(f"ARQ {args.uuid} ended in state {arq['state']}")


def build_parser(parents):
    parser = argparse.ArgumentParser(
        prog='steward arq',
        description='Accelerator requests (ARQs), as Nova creates and binds them.')
    sub = parser.add_subparsers(dest='action', required=True, metavar='ACTION')
    p = cli.add_action(sub, 'list', parents, cmd_list, help='list ARQs')
    p.add_argument('--instance', type=cli.uuid_arg, metavar='UUID',
                   help="only this instance's ARQs")
    output.add_arguments(p)

    p = cli.add_action(sub, 'show', parents, cmd_show, help='show one ARQ')
    p.add_argument('uuid', type=cli.uuid_arg, metavar='UUID')
    progress.add_arguments(p, 'the binding is resolved (exit 0: Bound)')
    output.add_arguments(p)
    return parser


def main(argv):
    return cli.run(build_parser, argv)


if __name__ == '__main__':
    import sys
    sys.exit(main(sys.argv[1:]))

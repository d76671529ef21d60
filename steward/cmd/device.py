"""``steward device ...``: devices through the API.

    steward device list|show|enable|disable ...   steward/cmd/device_listing.py
    steward device clean UUID [--wait]            re-clean a device in error
    steward device clean --plan UUID              which action would run and why
    steward device erase-records UUID             its cleanup attempts, newest first

``clean`` asks for ``POST /v2/devices/{uuid}/clean`` (microversion 2.5, admin).
With ``--wait`` it follows the device and its newest erase record (phase, SPROG %
during a sanitize, elapsed time) until the device is ``available`` (exit 0) or in
``error`` (exit 1, with the record's error code and message). Ctrl-C stops waiting,
not the cleanup (exit 130); ``--wait-timeout`` gives up waiting (exit 6). Exit codes
and connection options: steward/client (doc/cli.md).
"""
import argparse
import sys

from steward import client as cli
from steward.client import output
from steward.client import progress
from steward.cmd import device_listing

NEEDS = '2.5'
RECORD_COLUMNS = ('uuid', 'status', 'trigger', 'action', 'assurance_level',
                  'verification', 'started_at', 'finished_at', 'error_code')
RECORD_FIELDS = ('uuid', 'device_uuid', 'hostname', 'pci_address', 'trigger', 'status',
                 'action', 'assurance_level', 'serial', 'model', 'firmware',
                 'capabilities', 'started_at', 'finished_at', 'phase', 'progress',
                 'progress_detail', 'sstat', 'sstat_text', 'verification',
                 'verification_detail', 'error_code', 'error_message', 'details')
DONE_STATES = ('available', 'error')
MY_ACTIONS = ('clean', 'erase-records')


def _require_2_5(client, what):
    if not client.at_least(NEEDS):
        raise cli.UsageError(f'{what} needs microversion {NEEDS}; the API at '
                             f'{client.endpoint} is used at '
                             f'{".".join(map(str, client.version or (2, 0)))}')


def _yes(value):
    return 'yes' if value else 'no'


def plan_text(plan):
    """The plan for people, one fact a line."""
    caps = plan.get('capabilities') or {}
    pol = plan.get('policy') or {}
    lines = [f"device {plan['device_uuid']}: {plan['type']} on {plan['hostname']} "
             f"{plan.get('pci_address') or ''}, device_state {plan['device_state']}",
             f"policy: clear_action={pol.get('clear_action')} "
             f"clear_strategy={pol.get('clear_strategy')}"]
    if caps:
        lines.append(f"capabilities: CES {_yes(caps.get('ces'))}, BES "
                     f"{_yes(caps.get('bes'))}, WZS {_yes(caps.get('wzs'))}, namespace "
                     f"management {_yes(caps.get('ns_mgmt'))}")
    action = plan.get('cleanup_action')
    lines.append(f"cleanup action: {action} (assurance {plan.get('assurance_level')})"
                 if action else 'cleanup action: none (the device is excluded from the pool)')
    lines.append(f"why: {plan.get('reason')}")
    lines += [f'  {i}. {step}' for i, step in enumerate(plan.get('steps') or (), 1)]
    if plan.get('accepted'):
        lines.append('steward device clean would be accepted now')
    else:
        refusal = plan.get('refusal') or {}
        lines.append(f"steward device clean would be refused: {refusal.get('message')} "
                     f"(error_code={refusal.get('code')})")
    last = plan.get('last_erase_record')
    if last:
        lines.append(f"last cleanup: {last['status']} ({last.get('action')}) at "
                     f"{last.get('finished_at') or last.get('started_at')}"
                     + (f": {last['error_code']}: {last['error_message']}"
                        if last.get('error_code') else ''))
    return '\n'.join(lines)


def _watch(client, uuid, since):
    """The device and its newest erase record started after ``since``."""
    dev = client.get(f'/devices/{uuid}')
    records = client.get(f'/devices/{uuid}/erase_records', params={'limit': 1})[
        'erase_records']
    rec = records[0] if records and records[0]['uuid'] != since else None
    return {'state': dev.get('device_state'), 'record': rec}


def _describe(obj):
    rec, state = obj['record'], obj['state']
    if state in DONE_STATES:
        return progress.Progress(state)
    if rec is None or rec.get('status') != 'running':
        return progress.Progress(state, None, 'waiting for the agent')
    return progress.Progress(f"{state}: {rec.get('phase') or 'starting'}",
                             rec.get('progress'), rec.get('progress_detail') or '')


def _summary(rec):
    if rec is None:
        return ''
    text = (f"erase record {rec['uuid']}: {rec['status']}, action {rec.get('action')}, "
            f"assurance {rec.get('assurance_level')}, verification "
            f"{rec.get('verification')}")
    if rec.get('sstat_text'):
        text += f", SSTAT {rec['sstat_text']}"
    return text


def cmd_clean(client, args):
    _require_2_5(client, 'steward device clean')
    uuid = args.uuid
    if args.plan:
        plan = client.get(f'/devices/{uuid}/clean_plan')
        if args.format == 'table' and not args.columns:
            print(plan_text(plan))
        else:
            output.print_object(args, plan)
        return cli.EXIT_OK
    before = client.get(f'/devices/{uuid}/erase_records', params={'limit': 1})[
        'erase_records']
    client.post(f'/devices/{uuid}/clean')
    print(f'device {uuid}: cleanup accepted (pending_cleaning)', flush=True)
    if not args.wait:
        return cli.EXIT_OK
    final = progress.wait_for(
        get=lambda: _watch(client, uuid, before[0]['uuid'] if before else None),
        done=lambda obj: obj['state'] in DONE_STATES, describe=_describe,
        what=f'the cleanup of device {uuid}',
        resume=f'steward device erase-records {uuid} --limit 1',
        interval=args.interval, timeout=args.wait_timeout)
    rec = final['record']
    if final['state'] == 'available':
        print(f'device {uuid}: available (cleaned). {_summary(rec)}')
        return cli.EXIT_OK
    detail = f"{rec['error_code']}: {rec['error_message']}" if rec and \
        rec.get('error_code') else 'see steward device erase-records'
    raise cli.CliError(f'device {uuid}: cleanup failed, device in error: {detail}',
                       error_code=rec.get('error_code') if rec else None)


def cmd_erase_records(client, args):
    _require_2_5(client, 'steward device erase-records')
    params = {'limit': args.limit} if args.limit else None
    records = client.get(f'/devices/{args.uuid}/erase_records', params=params)[
        'erase_records']
    output.print_list(args, records, RECORD_COLUMNS, RECORD_FIELDS)
    return cli.EXIT_OK


def build_parser(parents):
    parser = argparse.ArgumentParser(
        prog='steward device', description='Device cleanup (through the API).')
    sub = parser.add_subparsers(dest='action', required=True, metavar='ACTION')
    p = cli.add_action(
        sub, 'clean', parents, cmd_clean,
        help='re-clean a device in error (admin), or show the plan with --plan',
        description='Re-run the cleanup locked in for a device in error '
                    '(POST /v2/devices/{uuid}/clean); --plan says which action would '
                    'run and why, executing nothing.')
    p.add_argument('uuid', type=cli.uuid_arg, metavar='UUID')
    p.add_argument('--plan', action='store_true',
                   help='show the action that would run and why; execute nothing')
    progress.add_arguments(p, 'the device is available or in error')
    p.add_argument('--interval', type=float, default=1.0, metavar='SECONDS',
                   help='with --wait: seconds between two polls (default 1)')
    output.add_arguments(p)
    p = cli.add_action(sub, 'erase-records', parents, cmd_erase_records,
                       help='cleanup attempts of a device, newest first',
                       description='Erase records: serial, firmware, action, '
                                   'capabilities, timings, SSTAT, verification and '
                                   'assurance level of every cleanup attempt.')
    p.add_argument('uuid', type=cli.uuid_arg, metavar='UUID')
    p.add_argument('--limit', type=int, metavar='N', help='the N newest only')
    output.add_arguments(p)
    return parser


def main(argv):
    argv = list(argv)
    # The first word naming an action decides (connection options may come first).
    first = next((a for a in argv if a in device_listing.ACTIONS + MY_ACTIONS), None)
    if first in device_listing.ACTIONS:
        return device_listing.main(argv)
    return cli.run(build_parser, argv)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

"""``openstack accelerator device clean|erase record list|history list`` and the
hooks that add Steward's device columns to ``accelerator device list|show``.

The built-in commands (python-openstackclient's, or python-cyborgclient's under
an older OSC) stay what they are: cliff command hooks
(``openstack.cli.accelerator_device_list`` / ``_show`` entry points) append
``device_state`` (microversion 2.5), ``last_error`` and ``missing`` (2.6;
``show`` also ``missing_since``) and ``health`` (2.8; ``show`` also
``health_conditions``, ``health_read_at``, ``health_fault``) to whatever they
return, read with the
Steward microversion (``--os-steward-api-version``). If the server cannot
give them (older microversion, not Steward) the columns are left out with a
warning and the built-in output is unchanged.
"""
import json
import logging

from cliff import columns as cliff_columns
from cliff import hooks
from osc_lib.command import command

from steward.osc import cli
from steward.osc import progress

LOG = logging.getLogger(__name__)

CLEAN = '2.5'
HISTORY = '2.6'
HEALTH = '2.8'
# ``health`` of a device at 2.8, as columns: list shows the state, show all of it.
HEALTH_COLUMNS = {'health': 'state', 'health_conditions': 'conditions',
                  'health_read_at': 'read_at', 'health_fault': 'fault'}
RECORD_COLUMNS = ('uuid', 'status', 'trigger', 'action', 'assurance_level',
                  'verification', 'started_at', 'finished_at', 'error_code')
RECORD_FIELDS = ('uuid', 'device_uuid', 'hostname', 'pci_address', 'trigger', 'status',
                 'action', 'assurance_level', 'serial', 'model', 'firmware',
                 'capabilities', 'capability_decision', 'started_at', 'finished_at',
                 'phase', 'progress',
                 'progress_detail', 'sstat', 'sstat_text', 'verification',
                 'verification_detail', 'error_code', 'error_message', 'details')
HISTORY_COLUMNS = ('created_at', 'event', 'source_state', 'target_state', 'actor',
                   'reason', 'request_id')
HISTORY_FIELDS = ('uuid',) + HISTORY_COLUMNS
PLAN_FIELDS = ('device_uuid', 'type', 'hostname', 'pci_address', 'device_state',
               'cleanup_action', 'assurance_level', 'reason', 'steps', 'policy',
               'capabilities', 'identify', 'accepted', 'refusal', 'last_erase_record')
CLEAN_FIELDS = ('device_uuid', 'device_state', 'last_error', 'erase_record_uuid',
                'status', 'action', 'assurance_level', 'verification', 'sstat_text',
                'error_code', 'error_message', 'started_at', 'finished_at')
DONE_STATES = ('available', 'error')


class JsonColumn(cliff_columns.FormattableColumn):
    """A dict or list: JSON text in tables, the structure itself in -f json/yaml
    (cliff's value/csv/shell formatters print it as Python would)."""

    def human_readable(self):
        return json.dumps(self._value, sort_keys=True)

    def machine_readable(self):
        return self._value


def _cell(value):
    return JsonColumn(value) if isinstance(value, (dict, list)) else value


def _row(obj, fields):
    return tuple(_cell(obj.get(f)) for f in fields)


def _client(cmd):
    return cmd.app.client_manager.steward


# --- accelerator device clean -----------------------------------------------------
def _newest_record(client, uuid):
    records = client.get(f'/devices/{uuid}/erase_records', params={'limit': 1})[
        'erase_records']
    return records[0] if records else None


def _watch(client, uuid, since):
    dev = client.get(f'/devices/{uuid}')
    rec = _newest_record(client, uuid)
    if rec is not None and rec['uuid'] == since:
        rec = None
    return {'device': dev, 'record': rec}


def _describe(obj):
    rec, state = obj['record'], obj['device'].get('device_state')
    if state in DONE_STATES:
        return progress.Progress(state)
    if rec is None or rec.get('status') != 'running':
        return progress.Progress(state, None, 'waiting for the agent')
    return progress.Progress(f"{state}: {rec.get('phase') or 'starting'}",
                             rec.get('progress'), rec.get('progress_detail') or '')


def _clean_result(dev, rec):
    rec = rec or {}
    merged = {'device_uuid': dev.get('uuid'), 'device_state': dev.get('device_state'),
              'last_error': dev.get('last_error'), 'erase_record_uuid': rec.get('uuid')}
    for field in CLEAN_FIELDS[4:]:
        merged[field] = rec.get(field)
    return CLEAN_FIELDS, _row(merged, CLEAN_FIELDS)


class _ExitCodes:
    """The exit codes of doc/cli.md for Steward's commands (OSC's own commands
    exit 1 on any error): an API or client error is one line on stderr and its
    code (3 not found, 4 not allowed, 5 unreachable, 6 --wait-timeout, 130
    Ctrl-C, 1 otherwise); argparse's usage errors exit 2."""

    def run(self, parsed_args):
        try:
            return super().run(parsed_args)
        except cli.CliError as err:
            self.app.stderr.write(f'{err}\n')
            return err.exit_code


class CleanDevice(_ExitCodes, command.ShowOne):
    _description = (
        'Re-run the cleanup locked in for a device in error (POST '
        '/v2/devices/{uuid}/clean, microversion 2.5, admin); with --plan show which '
        'action would run and why, executing nothing. With --wait follow it (phase, '
        'percent, elapsed on stderr) until the device is available (exit 0) or in '
        'error (exit 1); --wait-timeout gives up waiting (exit 6), Ctrl-C stops '
        'waiting, never the cleanup (exit 130).')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('device', metavar='<uuid>', type=cli.uuid_arg,
                            help='UUID of the device')
        parser.add_argument('--plan', action='store_true',
                            help='show the action that would run and why; execute '
                                 'nothing')
        parser.add_argument('--wait', action='store_true',
                            help='wait until the device is available or in error, '
                                 'showing progress on stderr')
        parser.add_argument('--wait-timeout', type=float, metavar='<seconds>',
                            help='with --wait: give up waiting after this long '
                                 '(exit 6; the cleanup goes on)')
        parser.add_argument('--interval', type=float, default=1.0,
                            metavar='<seconds>',
                            help='with --wait: seconds between two polls (default 1)')
        return parser

    def run(self, parsed_args):
        self._failure = None
        code = super().run(parsed_args)
        if code == cli.EXIT_OK and self._failure:
            self.app.stderr.write(f'{self._failure}\n')
            return cli.EXIT_API_ERROR
        return code

    def take_action(self, parsed_args):
        client = _client(self)
        uuid = parsed_args.device
        if parsed_args.plan and parsed_args.wait:
            raise cli.UsageError('--plan executes nothing: it does not go with --wait')
        if parsed_args.wait_timeout is not None and not parsed_args.wait:
            raise cli.UsageError('--wait-timeout goes with --wait')
        client.require(CLEAN, 'openstack accelerator device clean')
        if parsed_args.plan:
            plan = client.get(f'/devices/{uuid}/clean_plan')
            return PLAN_FIELDS, _row(plan, PLAN_FIELDS)
        before = _newest_record(client, uuid)
        client.post(f'/devices/{uuid}/clean')
        self.app.stderr.write(f'device {uuid}: cleanup accepted (pending_cleaning)\n')
        self.app.stderr.flush()
        since = before['uuid'] if before else None
        if not parsed_args.wait:
            now = _watch(client, uuid, since)
            return _clean_result(now['device'], now['record'])
        final = progress.wait_for(
            get=lambda: _watch(client, uuid, since),
            done=lambda obj: obj['device'].get('device_state') in DONE_STATES,
            describe=_describe, what=f'the cleanup of device {uuid}',
            resume=f'openstack accelerator device erase record list {uuid} --limit 1',
            interval=parsed_args.interval, timeout=parsed_args.wait_timeout,
            out=self.app.stderr)
        dev, rec = final['device'], final['record']
        if dev.get('device_state') != 'available':
            detail = f"{rec['error_code']}: {rec.get('error_message')}" \
                if rec and rec.get('error_code') else \
                (dev.get('last_error') or 'see openstack accelerator device erase '
                                          'record list')
            self._failure = f'device {uuid}: cleanup failed, device in error: {detail}'
        return _clean_result(dev, rec)


# --- accelerator device erase record list / history list ---------------------------
class ListEraseRecords(_ExitCodes, command.Lister):
    _description = ('Cleanup attempts (erase records) of a device, newest first: '
                    'action, assurance level, verification, SSTAT, timings; --long '
                    'adds serial, firmware, capabilities and details (microversion 2.5)')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('device', metavar='<uuid>', type=cli.uuid_arg,
                            help='UUID of the device')
        parser.add_argument('--limit', type=int, metavar='<n>',
                            help='the n newest only')
        parser.add_argument('--long', action='store_true',
                            help='every field of the records')
        return parser

    def take_action(self, parsed_args):
        client = _client(self)
        client.require(CLEAN, 'openstack accelerator device erase record list')
        params = {'limit': parsed_args.limit} if parsed_args.limit else None
        records = client.get(f'/devices/{parsed_args.device}/erase_records',
                             params=params)['erase_records']
        fields = RECORD_FIELDS if parsed_args.long else RECORD_COLUMNS
        return fields, (_row(r, fields) for r in records)


class ListDeviceHistory(_ExitCodes, command.Lister):
    _description = ('Every device_state change of a device, oldest first: event, '
                    'reason, request id and who made it (microversion 2.6)')

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('device', metavar='<uuid>', type=cli.uuid_arg,
                            help='UUID of the device')
        parser.add_argument('--long', action='store_true',
                            help='also the uuid of each entry')
        return parser

    def take_action(self, parsed_args):
        client = _client(self)
        client.require(HISTORY, 'openstack accelerator device history list')
        history = client.get(f'/devices/{parsed_args.device}/history')['history']
        fields = HISTORY_FIELDS if parsed_args.long else HISTORY_COLUMNS
        return fields, (_row(h, fields) for h in history)


# --- hooks on accelerator device list|show ----------------------------------------
def _extra_fields(client, show):
    fields = []
    if client.at_least(CLEAN):
        fields.append('device_state')
    if client.at_least(HISTORY):
        fields += ['last_error', 'missing'] + (['missing_since'] if show else [])
    if client.at_least(HEALTH):
        fields += list(HEALTH_COLUMNS) if show else ['health']
    return fields


def _field(device, name):
    """A device's value for column ``name`` (the health columns come from its
    ``health`` object)."""
    if name in HEALTH_COLUMNS:
        return (device.get('health') or {}).get(HEALTH_COLUMNS[name])
    return device.get(name)


class _DeviceColumnsHook(hooks.CommandHook):
    show = False

    def get_parser(self, parser):
        return parser

    def get_epilog(self):
        return ('Steward adds the columns device_state (microversion 2.5), '
                'last_error and missing (2.6), health (2.8) when the server offers them '
                '(--os-steward-api-version).')

    def before(self, parsed_args):
        return parsed_args

    def after(self, parsed_args, return_code):
        if not (isinstance(return_code, tuple) and len(return_code) == 2):
            return return_code
        names, data = return_code
        names = tuple(names)
        rows = [tuple(data)] if self.show else [tuple(r) for r in data]
        if 'uuid' not in names or 'device_state' in names:
            return names, (rows[0] if self.show else rows)
        at = names.index('uuid')
        try:
            client = _client(self.cmd)
            fields = _extra_fields(client, self.show)
            if self.show:
                devices = {rows[0][at]: client.get(f'/devices/{rows[0][at]}')}
            elif fields:
                devices = {d['uuid']: d for d in client.get('/devices')['devices']}
        except Exception as err:  # noqa: BLE001 - never break the built-in command
            LOG.warning('Steward device columns left out: %s', err)
            fields = []
        if fields:
            names += tuple(fields)
            rows = [r + tuple(_cell(_field(devices.get(r[at]) or {}, f)) for f in fields)
                    for r in rows]
        return names, (rows[0] if self.show else rows)


class DeviceListHook(_DeviceColumnsHook):
    show = False


class DeviceShowHook(_DeviceColumnsHook):
    show = True

"""``steward compute``: boot and delete instances with accelerators on this host,
the way nova-conductor and nova-compute would, against the running Steward API
and Placement (steward.compute).

Exit codes (scripts rely on them):

* 0 done
* 1 the operation failed and was undone (nothing left behind)
* 2 bad usage or input (flavor file, instance name, unknown instance, config);
  nothing was done
* 3 no valid host: Placement has no candidate for the flavor
* 4 undoing a failed boot, or a delete, left resources behind; the instance is
  kept in state ``error`` and ``steward compute delete NAME`` retries
"""
import argparse
import json
import logging
import os
import signal
import sys

from steward.common import exception

USAGE_ERRORS = (exception.FlavorInvalid, exception.DeviceProfileUnusable,
                exception.InstanceNameInvalid, exception.InstanceExists,
                exception.InstanceNotFound, exception.InvalidConfiguration)
LOG = logging.getLogger(__name__)
EXIT_FAILED, EXIT_USAGE, EXIT_NO_HOST, EXIT_LEFTOVERS = 1, 2, 3, 4


def _parser():
    parser = argparse.ArgumentParser(
        prog='steward compute',
        description='Boot/delete instances with accelerators on this host '
                    '(nova-conductor + nova-compute against Steward and Placement). '
                    'Also takes --config-file FILE (the same as `steward serve`).')
    sub = parser.add_subparsers(dest='action', required=True)
    boot = sub.add_parser('boot', help='schedule, claim, bind and compose the domain XML')
    boot.add_argument('--flavor', required=True, metavar='FLAVOR.json',
                      help="Nova's flavor representation; extra_specs "
                           "accel:device_profile names the device profile")
    boot.add_argument('--name', required=True, help='instance name (unique on this host)')
    boot.add_argument('--xml-out', metavar='PATH', help='write the domain XML there')
    delete = sub.add_parser('delete', help='remove mdevs, ARQs and the allocation')
    delete.add_argument('name', help='instance name or UUID')
    sub.add_parser('list', help='instances booted on this host')
    for p in (boot, delete, sub.choices['list']):
        p.add_argument('--os-endpoint', metavar='URL',
                       help='Steward API (default http://[api] host_ip:port/v2)')
        p.add_argument('--placement-endpoint', metavar='URL',
                       help='Placement (default: the embedded one, else [placement])')
        p.add_argument('--os-token', default=os.environ.get('OS_TOKEN'),
                       help='token sent as X-Auth-Token and X-Service-Token (Keystone '
                            'deployments; the token needs the service role)')
        p.add_argument('-f', '--format', choices=['text', 'json'], default='text')
    return parser


def _api_endpoint(conf, given):
    if given:
        return given
    host = conf.api.host_ip
    host = '127.0.0.1' if host in ('0.0.0.0', '') else \
        ('[::1]' if host == '::' else (f'[{host}]' if ':' in host else host))
    return f'http://{host}:{conf.api.port}/v2'


def _compute(conf, args):
    from steward.compute import boot as boot_mod
    from steward.placement import handle as placement_handle
    from steward.compute import clients
    placement_url = args.placement_endpoint or (
        placement_handle.embedded_url() if placement_handle.is_embedded() else None)
    api = clients.StewardApi(_api_endpoint(conf, args.os_endpoint), token=args.os_token)
    placement = clients.PlacementApi.from_conf(conf, endpoint=placement_url)
    return boot_mod.Compute(conf, api, placement)


def _read_flavor(path):
    from steward.compute import request
    try:
        with (sys.stdin if path == '-' else open(path)) as f:
            doc = json.load(f)
    except OSError as err:
        raise exception.FlavorInvalid(reason=f'cannot read {path}: {err.strerror or err}')
    except ValueError as err:
        raise exception.FlavorInvalid(reason=f'{path} is not JSON: {err}')
    return request.parse_flavor(doc)


def _check_xml_out(path):
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise exception.InvalidConfiguration(
            reason=f'--xml-out: {directory} is not a writable directory')


def _print_boot(record, args):
    if args.format == 'json':
        print(json.dumps({k: record[k] for k in (
            'name', 'uuid', 'status', 'host', 'compute_node', 'allocations', 'providers',
            'mappings', 'bound_arqs', 'mdevs', 'nova_device_conflicts', 'domain_xml')}
            | {'xml_out': args.xml_out}, indent=2, sort_keys=True))
        return
    print(f"Instance {record['name']} ({record['uuid']}) is {record['status']} on host "
          f"{record['host']} (compute node {record['compute_node']})")
    print('Placement allocations:')
    for rp, resources in sorted(record['allocations'].items()):
        amounts = ', '.join(f'{rc}={n}' for rc, n in sorted(resources.items()))
        print(f"  {record['providers'].get(rp) or '?'} ({rp}): {amounts}")
    if record['bound_arqs']:
        print('Accelerator requests (Bound):')
        for a in record['bound_arqs']:
            info = json.dumps(a['attach_handle_info'], sort_keys=True)
            print(f"  {a['uuid']} group {a['device_profile_group_id']} "
                  f"{a['attach_handle_type']} rp {a['device_rp_uuid']} handle "
                  f"{a['attach_handle_uuid']} {info}")
    for m in record['mdevs']:
        print(f"mdev {m['uuid']} type {m['type']} on {m['parent']} ({m['backend']})")
    if args.xml_out:
        print(f'Domain XML written to {args.xml_out}')
    else:
        print('Domain XML:')
        print(record['domain_xml'], end='')


def _print_list(records, args):
    if args.format == 'json':
        print(json.dumps(records, indent=2, sort_keys=True))
        return
    rows = [('NAME', 'UUID', 'STATUS', 'HOST', 'ARQS', 'CREATED')]
    for r in records:
        rows.append((r['name'], r['uuid'], r['status'], r.get('host') or '',
                     str(len(r.get('arqs') or [])), r.get('created_at') or ''))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print('  '.join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _boot(compute, args):
    flavor = _read_flavor(args.flavor)
    _check_xml_out(args.xml_out)
    # SIGTERM unwinds like Ctrl-C, so a stopped boot still undoes its claims.
    signal.signal(signal.SIGTERM, _terminate)
    record = compute.boot(flavor, args.name)
    if args.xml_out:
        try:
            with open(args.xml_out, 'w') as f:
                f.write(record['domain_xml'])
        except OSError as err:
            _print_boot(record, argparse.Namespace(format=args.format, xml_out=None))
            _fail(f'the instance is active but writing {args.xml_out} failed: '
                  f'{err.strerror or err}', EXIT_FAILED)
    _print_boot(record, args)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def _run(args, conf):
    if args.action == 'list':
        from steward.compute import state
        _print_list(state.Store(conf.state_path).list(), args)
        return 0
    compute = _compute(conf, args)
    try:
        if args.action == 'delete':
            record = compute.delete(args.name)
            if args.format == 'json':
                print(json.dumps({'deleted': record['name'], 'uuid': record['uuid']}))
            else:
                print(f"Deleted instance {record['name']} ({record['uuid']})")
        else:
            _boot(compute, args)
    finally:
        compute.api.close()
    return 0


def _fail(message, code):
    print(f'steward compute: {message}', file=sys.stderr)
    sys.exit(code)


def main(argv):
    args, rest = _parser().parse_known_args(argv)
    from oslo_log import log as oslo_log
    from steward import process
    from steward.conf import CONF
    # stdout carries the result (text or JSON); log lines go to stderr.
    oslo_log.register_options(CONF)
    CONF.set_default('use_stderr', True)
    try:
        process.prepare(rest)
    except SystemExit:
        raise
    except Exception as err:  # noqa: BLE001 - oslo.config's own errors (unknown option, bad file)
        _fail(f'configuration: {err}', EXIT_USAGE)
    try:
        return _run(args, CONF)
    except exception.NoValidHost as err:
        _fail(f'{err} [{err.code}]', EXIT_NO_HOST)
    except exception.CleanupIncomplete as err:
        _fail(f'{err} [{err.code}]', EXIT_LEFTOVERS)
    except USAGE_ERRORS as err:
        _fail(f'{err} [{err.code}]', EXIT_USAGE)
    except exception.StewardError as err:
        _fail(f'{err} [{err.code}]', EXIT_FAILED)
    except Exception as err:      # a bug: say what, the traceback is in the debug log
        LOG.debug('steward compute %s failed', args.action, exc_info=True)
        _fail(f'unexpected error: {type(err).__name__}: {err}', EXIT_FAILED)

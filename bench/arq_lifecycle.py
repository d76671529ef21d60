"""ARQ lifecycle throughput on the single-host stack (`steward serve`, default
settings: fake driver, embedded Placement, SQLite), the way Nova drives it.

One instance = GET device_profiles?name= -> POST ARQs -> collection PATCH bind ->
GET ?instance=&bind_state=resolved -> DELETE ?instance= (the issue's Nova-shaped
lifecycle). Prints, with the machine's size and the date:

* instances/second for sequential instances, and for 4 and 16 concurrent clients,
  with bind latency percentiles and, for the concurrent runs, the CPU per instance
  of the server (the one `steward serve` process) and of this load generator (a
  lean keep-alive http.client client: both share the machine's cores);
* double allocations (one attach handle held by two live instances: seen by the
  clients, and in snapshots of every Bound ARQ the API lists meanwhile) and 5xx
  answers, both of which must be 0;
* the bind of a single-accelerator device (a PCI function on a fake sysfs tree),
  where bind writes Placement's ``reserved``, reported separately;
* the accelerator API's total time for what Nova 34 sends for one boot and delete
  (a ``GET /v2`` version discovery before every call, ``GET device_profiles?name=``,
  POST, PATCH, ``GET ?instance=``, ``DELETE ?instance=``; user and service token,
  no microversion header).

    .venv/bin/python bench/arq_lifecycle.py [--sequential 200] [--clients 4,16]
                                            [--per-client 50] [--single 50] [--nova 50]
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The lifecycle and load generator live in bench/load.py (shared with
# bench/upstream_cyborg.py and bench/production.py); the names stay importable here.
from bench.load import (  # noqa: E402,F401
    NOVA_HEADERS, PROFILE, URL, ClientError, LeanClient, Response, Tally, bind_body, client,
    cpu_self, ms, nova_sequence, one_instance, pct, run_clients, watch_bound)
from tests.fixtures.stack import running_stack  # noqa: E402
from tests.fixtures.stack import cpu_seconds as stack_cpu_seconds  # noqa: E402

# A single-function PCI device (fake sysfs tree) for the single-accelerator bind.
PCI_BDF, PCI_VENDOR, PCI_PRODUCT = '0000:3b:00.0', '0x10de', '0x25b6'
PCI_RC = 'CUSTOM_PCI_10DE_25B6'


def cpu_seconds(pid=None):
    """CPU time (user + system) of the API processes of the server ``pid`` (the
    embedded Placement not included), or of this process."""
    if pid is None:
        return cpu_self()
    return stack_cpu_seconds([pid])


def concurrent_run(url, rp_uuid, clients, per_client, tally, server_pid):
    """(instances/s, bind times, failures, server and load-generator CPU ms per
    instance)."""
    run = run_clients(url, rp_uuid, clients, per_client, tally, watch=True,
                      cpu={'server': lambda: cpu_seconds(server_pid)})
    return (run.started / run.elapsed, run.binds, run.failures,
            [run.cpu['server'], run.cpu['load generator']])


def pci_tree(root):
    from tests.fixtures.sysfs_tree import make_pci
    make_pci(root, PCI_BDF, PCI_VENDOR, PCI_PRODUCT, driver='vfio-pci')


def single_accelerator(count):
    """Bind latencies on one single-function PCI device (bind reserves it whole in
    Placement, delete lifts it)."""
    import pathlib
    with tempfile.TemporaryDirectory(prefix='steward-bench-sysfs-') as tmp:
        root = pathlib.Path(tmp) / 'sys'
        pci_tree(root)
        spec = f'{{"vendor_id": "{PCI_VENDOR[2:]}", "product_id": "{PCI_PRODUCT[2:]}"}}'
        extra = (f'[DEFAULT]\nsysfs_root = {root}\n[agent]\nenabled_drivers = pci\n'
                 f'[pci]\ndevice_spec = {spec}\n')
        with running_stack(extra_conf=extra) as stack, client(stack.url) as c:
            c.post('/v2/device_profiles', json=[{
                'name': 'bench-pci', 'groups': [{f'resources:{PCI_RC}': '1'}]}]
            ).raise_for_status()
            rp_uuid = c.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
            for _ in range(3):
                one_instance(c, rp_uuid, [], profile='bench-pci')
            binds = []
            for _ in range(count):
                one_instance(c, rp_uuid, binds, profile='bench-pci')
            reserved = httpx.get(
                f'{stack.placement_url}/resource_providers/{rp_uuid}/inventories',
                headers={'X-Auth-Token': 'admin'}).json()['inventories'][PCI_RC]['reserved']
    return binds, reserved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sequential', type=int, default=200, help='(0: skip)')
    ap.add_argument('--clients', default='4,16',
                    help='comma-separated numbers of concurrent clients')
    ap.add_argument('--per-client', type=int, default=50)
    ap.add_argument('--single', type=int, default=50,
                    help='instances on the single-accelerator device (0: skip)')
    ap.add_argument('--nova', type=int, default=50,
                    help="Nova-shaped boot+delete sequences (0: skip)")
    ap.add_argument('--conf', default='',
                    help='extra lines for the server\'s configuration file, e.g. '
                         '"[DEFAULT]\\ndefault_log_levels = steward.api.requestlog=WARN"'
                         ' (the cost of the request log)')
    args = ap.parse_args()
    tally = Tally()
    runs = []
    with running_stack(extra_conf=args.conf.replace('\\n', '\n')) as stack:
        url = stack.url
        with client(url, tally, timeout=30) as c:
            c.post('/v2/device_profiles', json=[{
                'name': PROFILE, 'groups': [{'resources:FPGA': '1'}]}]).raise_for_status()
            rp_uuid = c.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
            # Warm-up: steady state, after what a start leaves running (the first
            # discovery report, the embedded Placement's workers settling).
            for _ in range(50):
                one_instance(c, rp_uuid, [])
            binds = []
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                one_instance(c, rp_uuid, binds, tally)
            seq = args.sequential / (time.perf_counter() - t0)
            nova = [nova_sequence(c, rp_uuid, PROFILE) for _ in range(args.nova)]
        for n in [int(x) for x in args.clients.split(',') if x.strip()]:
            runs.append((n,) + concurrent_run(url, rp_uuid, n, args.per_client, tally,
                                              stack.proc.pid))
    single = single_accelerator(args.single) if args.single else None

    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}')
    if args.sequential:
        print(f'sequential: {args.sequential} instances, {seq:.1f} instances/s')
        print(f'  bind latency p50 {ms(statistics.median(binds))}, '
              f'p90 {ms(pct(binds, 90))}, p99 {ms(pct(binds, 99))}')
    for n, rate, conc_binds, failures, (server_cpu, client_cpu) in runs:
        print(f'concurrent: {n} clients x {args.per_client}, {rate:.1f} instances/s'
              f'{f", {len(failures)} failed instances" if failures else ""}; CPU per '
              f'instance: server {server_cpu:.1f} ms, load generator {client_cpu:.1f} ms')
        print(f'  bind latency p50 {ms(statistics.median(conc_binds))}, '
              f'p90 {ms(pct(conc_binds, 90))}, p99 {ms(pct(conc_binds, 99))}')
    print(f'double allocations: {len(tally.double)}; 5xx answers: {tally.server_errors}')
    for item in tally.double[:5]:
        print(f'  {item}')
    if nova:
        print(f'Nova boot+delete sequence (10 calls with version discovery), accelerator '
              f'API total: p50 {ms(statistics.median(nova))}, p90 {ms(pct(nova, 90))}')
    if single is not None:
        sbinds, reserved = single
        print(f'single-accelerator PCI device (bind writes Placement reserved): '
              f'{args.single} binds, p50 {ms(statistics.median(sbinds))}, '
              f'p90 {ms(pct(sbinds, 90))}, p99 {ms(pct(sbinds, 99))} '
              f'(reserved after the last delete: {reserved})')


if __name__ == '__main__':
    main()

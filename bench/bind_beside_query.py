"""Binds while Placement answers the query clouds must not let stall it (issue 52,
"How it will be checked"): eight one-unit groups, the request upstream Cyborg's
documentation tells users to write and Placement's combinatorial explosion on
one provider per GPU (Launchpad bugs 2070257, 2126751).

`steward serve` (its embedded Placement with Steward's defaults, bench/pools.py
and doc/install.md "The embedded Placement") on the pci driver over a fake sysfs
tree of ``--clients`` single-function devices, one per client: each bind of
such a device writes Placement's ``reserved`` (reserved whole), each delete
lifts it, the Placement writes a stalled worker held 30 s before issue 52. The
same Placement also holds a host of eight per-GPU providers (PGPU, total 1
each), Nova's way of registering it, built through Placement's API.

Two phases of ``--clients`` clients booting and deleting ``--per-client``
instances each, as Nova does (bench/load.py's lifecycle): alone, then while
``--queriers`` threads send ``GET /allocation_candidates`` with eight
one-unit groups (group_policy none, limit 1000, Nova 34's microversion) against
that host, one after another, each given up after ``--query-timeout`` seconds.
Prints bind p50/p90/p99 of each phase and their ratio (target: p99 within 2x),
failed instances and 5xx answers (target 0), and the queries' times and
candidate counts.

    .venv/bin/python bench/bind_beside_query.py [--clients 16] [--per-client 30]
        [--queriers 1] [--query-timeout 120]
"""
import argparse
import concurrent.futures
import datetime
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.load import (  # noqa: E402
    FAILURES, LeanClient, Tally, client, ms, one_instance, pct)
from tests.fixtures.stack import running_stack  # noqa: E402
from tests.fixtures.sysfs_tree import make_gpu_server  # noqa: E402

VENDOR, PRODUCT = '0x10de', '0x2330'
RC = 'CUSTOM_PCI_10DE_2330'
PROFILE = 'bench-gpu'
PLACEMENT = {'X-Auth-Token': 'admin', 'OpenStack-API-Version': 'placement 1.36'}


def per_gpu_host(placement_url):
    """A compute node with eight one-unit PGPU providers under it, as one
    provider per device registers an eight-GPU server; returns its uuid."""
    with httpx.Client(base_url=placement_url, headers=PLACEMENT, timeout=60) as p:
        root = str(uuid.uuid4())
        p.post('/resource_providers', json={'uuid': root, 'name': f'per-gpu-{root[:8]}'}
               ).raise_for_status()
        gen = p.get(f'/resource_providers/{root}').json()['generation']
        p.put(f'/resource_providers/{root}/inventories', json={
            'resource_provider_generation': gen, 'inventories': {
                'VCPU': {'total': 224}, 'MEMORY_MB': {'total': 2 ** 21},
                'DISK_GB': {'total': 10000}}}).raise_for_status()
        for i in range(8):
            rp = str(uuid.uuid4())
            p.post('/resource_providers', json={
                'uuid': rp, 'name': f'per-gpu-{root[:8]}_0000:{0x18 + i:02x}:00.0',
                'parent_provider_uuid': root}).raise_for_status()
            gen = p.put(f'/resource_providers/{rp}/traits', json={
                'resource_provider_generation': 0, 'traits': ['OWNER_CYBORG']}).json()[
                'resource_provider_generation']
            p.put(f'/resource_providers/{rp}/inventories', json={
                'resource_provider_generation': gen,
                'inventories': {'PGPU': {'total': 1}}}).raise_for_status()
    return root


def eight_groups(root):
    query = [('resources', 'VCPU:1,MEMORY_MB:1024,DISK_GB:1'), ('limit', '1000'),
             ('group_policy', 'none'), ('in_tree', root)]
    for i in range(8):
        query += [(f'resources_device_profile_{i}', 'PGPU:1'),
                  (f'required_device_profile_{i}', 'OWNER_CYBORG')]
    return query


def querier(placement_url, root, stop, timeout, out):
    """Queries one after another until ``stop``: [(seconds, candidates or None
    when given up)]."""
    query = eight_groups(root)
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            r = httpx.get(f'{placement_url}/allocation_candidates', params=query,
                          headers=PLACEMENT, timeout=timeout)
            found = len(r.json()['allocation_requests']) if r.status_code == 200 else None
        except httpx.TimeoutException:
            found = None
        out.append((time.perf_counter() - t0, found))


def phase(url, rps, per_client, tally):
    """Every client boots and deletes ``per_client`` instances on its own device:
    (bind times, failures, seconds)."""
    binds, failures = [], []

    def loop(rp):
        with LeanClient(url, tally, timeout=120) as c:
            for _ in range(per_client):
                try:
                    one_instance(c, rp, binds, tally, profile=PROFILE)
                except FAILURES as err:
                    failures.append(err)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(rps)) as ex:
        list(ex.map(loop, rps))
    return binds, failures, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--clients', type=int, default=16)
    ap.add_argument('--per-client', type=int, default=30)
    ap.add_argument('--queriers', type=int, default=1)
    ap.add_argument('--query-timeout', type=float, default=120)
    args = ap.parse_args()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix='steward-bench-sysfs-') as tmp:
        root = pathlib.Path(tmp) / 'sys'
        make_gpu_server(root, [0] * args.clients, VENDOR, PRODUCT)
        spec = f'{{"vendor_id": "{VENDOR[2:]}", "product_id": "{PRODUCT[2:]}"}}'
        extra = (f'[DEFAULT]\nsysfs_root = {root}\n[agent]\nenabled_drivers = pci\n'
                 f'[pci]\ndevice_spec = {spec}\n')
        with running_stack(extra_conf=extra) as stack:
            with client(stack.url, tally, timeout=30) as c:
                c.post('/v2/device_profiles', json=[{
                    'name': PROFILE, 'groups': [{f'resources:{RC}': '1'}]}]
                ).raise_for_status()
                rps = sorted(d['rp_uuid'] for d in c.get('/v2/deployables').json()[
                    'deployables'])
                for rp in rps:                          # warm-up
                    one_instance(c, rp, [], profile=PROFILE)
            host = per_gpu_host(stack.placement_url)
            alone = phase(stack.url, rps, args.per_client, tally)
            stop, queries, threads = threading.Event(), [], []
            for _ in range(args.queriers):
                t = threading.Thread(target=querier, args=(
                    stack.placement_url, host, stop, args.query_timeout, queries))
                t.start()
                threads.append(t)
            # The phase starts once a query is under way (the first is sent at once).
            time.sleep(0.5)
            beside = phase(stack.url, rps, args.per_client, tally)
            stop.set()
            for t in threads:
                t.join()
            log = stack.log()
    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; '
          f'load average {os.getloadavg()[0]:.1f}')
    print(f'{args.clients} clients x {args.per_client} instances, each client on its own '
          f'single-function PCI device (a bind writes Placement reserved, a delete '
          f'lifts it)')
    for name, (binds, failures, secs) in (('alone', alone), ('beside the query', beside)):
        print(f'  {name:18} bind p50 {ms(statistics.median(binds))}, p90 '
              f'{ms(pct(binds, 90))}, p99 {ms(pct(binds, 99))}; '
              f'{len(binds) / secs:.1f} binds/s; failed instances {len(failures)}')
    ratio = pct(beside[0], 99) / pct(alone[0], 99)
    print(f'  bind p99 beside the query / alone: {ratio:.2f}x (target <= 2x: '
          f'{"met" if ratio <= 2 else "NOT met"})')
    given_up = [s for s, found in queries if found is None]
    answered = [s for s, found in queries if found is not None]
    print(f'eight one-unit groups on a per-GPU host: {len(queries)} queries during the '
          f'phase, {len(answered)} answered (p50 '
          f'{ms(statistics.median(answered)) if answered else "-"}, candidates '
          f'{sorted({f for _, f in queries if f is not None})}), {len(given_up)} given up '
          f'after {args.query_timeout:g} s')
    print(f'5xx answers: {tally.server_errors}; double allocations: {len(tally.double)}; '
          f'BindFailed in the server log: {log.count("BindFailed")}')


if __name__ == '__main__':
    main()

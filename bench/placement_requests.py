"""What each Placement request a conductor makes costs the real Placement, in CPU.

Starts the real Placement (steward/placement/embedded.py, 2 gunicorn workers) on a
throw-away PostgreSQL database, registers ``--hosts`` compute nodes as Nova does
(bench/fleet.py's: a root provider each, with its inventory), then sends each kind of request a host's first
registration can cost, one at a time, and prints Placement's CPU per request
(/proc/<pid>/stat of its processes) and the wall time: the figures behind
steward/conductor/report/trees.py (when one listing of every provider costs less
than each host's two reads) and doc/multihost.md's sizing.

    .venv/bin/python bench/placement_requests.py [--hosts 10000] [--requests 300]
"""
import argparse
import os
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import fleet  # noqa: E402
from bench import load  # noqa: E402
from tests.multihost import pg  # noqa: E402
from tests.multihost import rabbit  # noqa: E402

# The service role: POST /reshaper needs it (doc/multihost.md).
HEADERS = {'X-Auth-Token': 'admin', 'X-Roles': 'admin,service',
           'OpenStack-API-Version': 'placement 1.39'}
RESHAPE = 64        # providers per reshape, a first-registration batch's size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hosts', type=int, default=10000)
    parser.add_argument('--requests', type=int, default=300,
                        help='requests of each kind measured')
    args = parser.parse_args()
    srv = pg.server()
    if srv is None:
        sys.exit('PostgreSQL is not installed (tools/system-packages.sh)')
    import httpx

    from steward.placement import handle as embedded
    _name, db = pg.create_database(srv, prefix='placement_requests')
    placement = embedded.start_subprocess(db, '127.0.0.1', rabbit.free_port(),
                                          log_file=os.devnull)
    try:
        print(f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, '
              f'{os.cpu_count()} cores, load average '
              f'{"/".join(f"{x:.1f}" for x in os.getloadavg())}')
        hosts = [f'host-{i:05d}' for i in range(args.hosts)]
        roots = fleet.nova_compute_nodes(placement.url, hosts)
        print(f'{args.hosts} compute nodes registered; Placement CPU per request, '
              f'one request at a time:')
        client = httpx.Client(base_url=placement.url, trust_env=False, timeout=600,
                              headers=HEADERS)

        def measure(label, send, count, per=1):
            cpu0, started = load.tree_cpu(placement.pid), time.monotonic()
            for i in range(count):
                r = send(i)
                if r.status_code >= 300:
                    sys.exit(f'{label}: {r.status_code} {r.text}')
            cpu = (load.tree_cpu(placement.pid) - cpu0) / count / per
            wall = (time.monotonic() - started) / count / per
            print(f'  {label}: {cpu * 1000:.2f} ms of CPU, {wall * 1000:.2f} ms wall')
            return cpu

        n = min(args.requests, args.hosts)
        by_name = measure('GET /resource_providers?name= (a compute node by name)',
                          lambda i: client.get('/resource_providers',
                                               params={'name': hosts[i]}), n)
        in_tree = measure('GET /resource_providers?in_tree= (its tree)',
                          lambda i: client.get('/resource_providers',
                                               params={'in_tree': roots[hosts[i]]}), n)
        devices = [str(uuid.uuid4()) for _ in range(n)]
        measure('POST /resource_providers (a device provider)',
                lambda i: client.post('/resource_providers', json={
                    'name': f'{hosts[i]}_dev', 'uuid': devices[i],
                    'parent_provider_uuid': roots[hosts[i]]}), n)
        client.put('/traits/CUSTOM_BENCH_DEVICE').raise_for_status()
        measure('PUT .../traits (its traits)',
                lambda i: client.put(f'/resource_providers/{devices[i]}/traits', json={
                    'resource_provider_generation': 0,
                    'traits': ['OWNER_CYBORG', 'CUSTOM_BENCH_DEVICE']}), n)
        client.put('/resource_classes/CUSTOM_BENCH').raise_for_status()
        chunks = n // 2 // RESHAPE
        if chunks:
            measure(f'POST /reshaper (inventories of {RESHAPE} providers), per provider',
                    lambda c: client.post('/reshaper', json={'allocations': {}, 'inventories': {
                        devices[j]: {'resource_provider_generation': 1, 'inventories': {
                            'CUSTOM_BENCH': {'total': 16}}}
                        for j in range(c * RESHAPE, (c + 1) * RESHAPE)}}), chunks, RESHAPE)
        rest = range(chunks * RESHAPE, n)
        if rest:
            measure('PUT .../inventories (one provider\'s)',
                    lambda i: client.put(f'/resource_providers/{devices[rest[i]]}/inventories',
                                         json={'resource_provider_generation': 1,
                                               'inventories': {'CUSTOM_BENCH': {'total': 16}}}),
                    len(rest))
        total = len(client.get('/resource_providers').json()['resource_providers'])
        listing = measure(f'GET /resource_providers (every provider: {total})',
                          lambda i: client.get('/resource_providers'), 3)
        print(f'one listing of every provider costs Placement as much as the two reads '
              f'of {listing / (by_name + in_tree):.0f} hosts '
              f'({total / (listing / (by_name + in_tree)):.0f} providers listed per host)')
    finally:
        placement.stop()


if __name__ == '__main__':
    main()

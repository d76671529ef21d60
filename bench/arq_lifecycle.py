"""ARQ lifecycle throughput on the single-host stack, the way Nova drives it.

One instance = POST ARQs -> collection PATCH bind -> GET ?instance=&bind_state=resolved
-> DELETE ?instance=. Prints instances/second for 50 sequential instances and for
16 concurrent clients, and bind latency percentiles.

    .venv/bin/python bench/arq_lifecycle.py [--sequential 50] [--clients 16] [--per-client 10]
"""
import argparse
import concurrent.futures
import os
import statistics
import sys
import time
import uuid

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.stack import running_stack  # noqa: E402

PROFILE = 'bench-fpga'


def one_instance(client, rp_uuid, bind_times):
    inst = str(uuid.uuid4())
    r = client.post('/v2/accelerator_requests', json={'device_profile_name': PROFILE})
    r.raise_for_status()
    arqs = r.json()['arqs']
    body = {a['uuid']: [{'op': 'add', 'path': '/hostname', 'value': 'bench-host'},
                        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
                        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]
            for a in arqs}
    t0 = time.perf_counter()
    r = client.patch('/v2/accelerator_requests', json=body)
    bind_times.append(time.perf_counter() - t0)
    r.raise_for_status()
    r = client.get('/v2/accelerator_requests',
                   params={'instance': inst, 'bind_state': 'resolved'})
    r.raise_for_status()
    assert all(a['state'] == 'Bound' for a in r.json()['arqs']), r.text
    client.delete('/v2/accelerator_requests', params={'instance': inst}).raise_for_status()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--sequential', type=int, default=50)
    ap.add_argument('--clients', type=int, default=16)
    ap.add_argument('--per-client', type=int, default=10)
    args = ap.parse_args()
    with running_stack() as stack:
        url = stack.url
        with httpx.Client(base_url=url, timeout=30) as c:
            c.post('/v2/device_profiles', json=[{
                'name': PROFILE, 'groups': [{'resources:FPGA': '1'}]}]).raise_for_status()
            rp_uuid = c.get('/v2/deployables').json()['deployables'][0]['rp_uuid']
            for _ in range(5):                                  # warm-up
                one_instance(c, rp_uuid, [])
            binds = []
            t0 = time.perf_counter()
            for _ in range(args.sequential):
                one_instance(c, rp_uuid, binds)
            seq = args.sequential / (time.perf_counter() - t0)

        conc_binds = []

        def client_loop(_):
            with httpx.Client(base_url=url, timeout=60) as cc:
                for _ in range(args.per_client):
                    one_instance(cc, rp_uuid, conc_binds)

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(client_loop, range(args.clients)))
        conc = args.clients * args.per_client / (time.perf_counter() - t0)

    ms = lambda v: f'{v * 1000:.1f} ms'  # noqa: E731
    print(f'sequential: {args.sequential} instances, {seq:.1f} instances/s')
    print(f'  bind latency p50 {ms(statistics.median(binds))}, p90 {ms(pct(binds, 90))}, '
          f'p99 {ms(pct(binds, 99))}')
    print(f'concurrent: {args.clients} clients x {args.per_client}, {conc:.1f} instances/s')
    print(f'  bind latency p50 {ms(statistics.median(conc_binds))}, '
          f'p90 {ms(pct(conc_binds, 90))}')


if __name__ == '__main__':
    main()

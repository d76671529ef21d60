"""Recovery time per fault kind on the multi-host deployment of the chaos test.

    .venv/bin/python bench/recovery.py [--rounds 3] [--seed N] [--kinds a,b] [--quick]

Started here and stopped at the end: tests/multihost/chaos.py's ChaosCluster
(RabbitMQ, a database on the tests' PostgreSQL, the real Placement, one conductor
with its periodic tasks every 2 s, `steward api` with two workers, agents on two
hosts, each in a network namespace when run as root). For each round, in an order
drawn from the seed: the fault (kill -9 of the conductor, an API worker, the whole
API, an agent or Placement; RabbitMQ stopped; PostgreSQL's immediate shutdown), its
down time (drawn from the seed, 0.5-4 s), its end (the process or service started
again; an API worker: gunicorn has replaced it), then one Nova-like client
(tests/multihost/chaos.py's Client: claim, create, bind, wait; retried on 503 and
connection errors every 0.1 s, another device when Placement refuses the claim)
boots until Steward acknowledges a Bound ARQ. Printed per kind: the time from the
fault's end to that acknowledged boot, median and max over the rounds. Between
rounds the instance is deleted and the deployment waited for at rest (the chaos
test's invariants), so that each round starts healed; a violation is printed.
"""
import argparse
import datetime
import os
import random
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import load  # noqa: E402
from tests.multihost import chaos  # noqa: E402
from tests.multihost import flows  # noqa: E402
from tests.multihost import rabbit  # noqa: E402


def _wait_at_rest(cluster, clients, timeout=180):
    return chaos.wait_at_rest(cluster, clients, timeout, interval=0.2)


def one_round(cluster, client, kind, down, rng):
    victim = chaos.inject(cluster, kind, rng)
    time.sleep(down)
    chaos.heal(cluster, kind, victim)
    ended = time.monotonic()
    while True:
        dev = client.pool.take(rng)
        if dev is not None:
            if client.boot(dev):
                break
            client.pool.give(dev)
        time.sleep(0.1)
    took = time.monotonic() - ended
    for what, answer, secs in client.slow:
        print(f'  slow call: {what} answered {answer} after {secs} s', flush=True)
    client.slow.clear()
    client.delete_all()
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=3, help='rounds per fault kind')
    ap.add_argument('--seed', type=int, default=chaos.seed_and_rounds()[0])
    ap.add_argument('--kinds', default=','.join(chaos.FAULT_KINDS),
                    help='comma-separated fault kinds, of ' + ', '.join(chaos.FAULT_KINDS))
    ap.add_argument('--classic-queues', action='store_true',
                    help="oslo.messaging's default classic queues instead of the guide's "
                         'rabbit_quorum_queue = true')
    ap.add_argument('--quick', action='store_true',
                    help='one round per kind: to check the script, not for figures')
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    kinds = [k.strip() for k in args.kinds.split(',') if k.strip()]
    unknown = set(kinds) - set(chaos.FAULT_KINDS)
    if unknown:
        ap.error(f'unknown fault kinds: {sorted(unknown)}')
    if not rabbit.installed():
        sys.exit('rabbitmq-server is not installed (tools/system-packages.sh)')
    # SIGTERM (a timeout, a CI runner) ends the run through the finally block.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    plan = [k for k in kinds for _ in range(args.rounds)]
    rng.shuffle(plan)
    print(f'machine: {os.cpu_count()} cores; '
          f'{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; '
          f'load average {load.load_average()}; seed {args.seed}; '
          f'{args.rounds} round(s) per kind', flush=True)
    cluster = chaos.ChaosCluster()
    cluster.quorum_queues = not args.classic_queues
    cluster.start()
    times, problems = {k: [] for k in kinds}, []
    try:
        with cluster.api_client() as api:
            flows.ensure_profile(api)
        client = chaos.Client(cluster, chaos.Pool(cluster), 0, args.seed)
        client.pause = (0.1, 0.1)
        for i, kind in enumerate(plan, 1):
            down = round(rng.uniform(0.5, 4.0), 2)
            took = one_round(cluster, client, kind, down, rng)
            times[kind].append(took)
            print(f'round {i}/{len(plan)}: {kind} down {down} s; first boot '
                  f'{took:.2f} s after its end', flush=True)
            found = _wait_at_rest(cluster, [client])
            if found:
                problems.append((kind, found))
                print(f'  NOT AT REST after {kind}: {found}', flush=True)
        problems += [('client', v) for v in client.violations]
    finally:
        cluster.stop()
    print(f'\nrecovery: time from the fault\'s end to the first acknowledged boot '
          f'(seed {args.seed}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d} UTC)')
    print(f'{"fault":<12} {"rounds":>6} {"median s":>9} {"max s":>7}')
    for kind in kinds:
        t = times[kind]
        if t:
            print(f'{kind:<12} {len(t):>6} {statistics.median(t):>9.2f} {max(t):>7.2f}')
    print(f'violations: {len(problems)}')
    for p in problems:
        print(f'  {p}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

"""The seeded chaos test of issue 30: the multi-host deployment under Nova-like
load (clients booting and deleting instances) while its processes and backing
services are killed and restarted on a schedule drawn from a seeded
random.Random: kill -9 of the conductor, an API worker, the whole API, an agent,
Placement; RabbitMQ stopped; PostgreSQL's immediate shutdown. Each fault is ended
as a supervisor would (the process started again, the service started); nothing
else is restarted. After the storm the clients stop and, at rest, the invariants
must hold: no acknowledged ARQ lost, none resurrected, none transitional, no
device or handle held twice, Placement's usages equal to the Bound ARQs, every
device in service (no reservation left for a released device), and no 500 from
the API at any time (503 is the answer of an outage).

    STEWARD_CHAOS_SEED=<int> STEWARD_CHAOS_ROUNDS=<n> .venv/bin/python -m pytest \
        -p no:cacheprovider tests/multihost/test_chaos.py -s
"""
import random
import time

import pytest

from tests.multihost import chaos
from tests.multihost import cluster as cluster_mod
from tests.multihost import flows

pytestmark = pytest.mark.slow
CLIENTS = 3


@pytest.fixture(scope='module')
def chaos_cluster():
    cluster_mod.require()
    c = chaos.ChaosCluster().start()
    yield c
    c.stop()


def test_seeded_storm_heals_without_a_restart_and_loses_nothing(chaos_cluster, capsys):
    cluster = chaos_cluster
    seed, rounds = chaos.seed_and_rounds()
    plan = chaos.schedule(seed, rounds)
    with capsys.disabled():
        print(f'\nchaos: {chaos.SEED_ENV}={seed} {chaos.ROUNDS_ENV}={rounds} '
              f'schedule {plan}', flush=True)
    with cluster.api_client() as api:
        flows.ensure_profile(api)
    pool = chaos.Pool(cluster)
    # At rest before the storm, and the checker sees a loss: an acknowledged ARQ
    # that the deployment lacks.
    assert chaos.at_rest(cluster, [], timeout=60) == []
    phantom = chaos.Client(cluster, pool, 99, seed)
    phantom.live['an-instance'] = ('an-arq', cluster.hosts[0], 'a-provider')
    assert chaos.violations_at_rest(cluster, [phantom]) == [
        'lost: acknowledged ARQ an-arq of an-instance']
    clients = [chaos.Client(cluster, pool, i, seed).start() for i in range(CLIENTS)]
    rng = random.Random(seed)
    started = time.monotonic()
    try:
        for kind, gap, down in plan:
            time.sleep(gap)                      # the schedule, not a wait for a state
            victim = chaos.inject(cluster, kind, rng)
            time.sleep(down)
            chaos.heal(cluster, kind, victim)
            with capsys.disabled():
                print(f'chaos: {kind} down {down} s, healed at '
                      f'{time.monotonic() - started:.1f} s', flush=True)
        # Load goes on across the last heal, then the drain: the clients finish what
        # they are doing (each call retried until the deployment answers it).
        pids = {s.name: s.pid for s in cluster.services()}
        cluster.wait_ready(timeout=180, settle=False)
        cluster.wait_for(lambda: len(cluster.api_worker_pids()) == cluster.api_workers,
                         'every API worker up')
        workers = sorted(cluster.api_worker_pids())
    finally:
        for c in clients:
            c.join()
    storm = time.monotonic() - started

    problems = [v for c in clients for v in c.violations]
    problems += chaos.at_rest(cluster, clients, timeout=120)
    problems += chaos.allocations_of_live(cluster, clients)
    # Healed by itself: nobody restarted anything after the last scheduled heal.
    assert {s.name: s.pid for s in cluster.services()} == pids
    assert sorted(cluster.api_worker_pids()) == workers
    booted = sum(c.booted for c in clients)
    with capsys.disabled():
        statuses = {}
        for c in clients:
            for k, n in c.statuses.items():
                statuses[str(k)] = statuses.get(str(k), 0) + n
        print(f'chaos: storm {storm:.1f} s; {booted} boots acknowledged, '
              f'{sum(c.failed_boots for c in clients)} failed and cleaned up, '
              f'{sum(c.refused_claims for c in clients)} claims refused, '
              f'{sum(c.uncertain_creates for c in clients)} creates unanswered; '
              f'answers {statuses}', flush=True)
        for line in [f for c in clients for f in c.failures]:
            print(f'chaos: {line}')
        for what, answer, took in [x for c in clients for x in c.slow]:
            print(f'chaos: slow call: {what} answered {answer} after {took} s')
    assert problems == [], '\n'.join(problems)
    assert booted > 0

    # Then every instance deleted: the deployment back to all free.
    for c in clients:
        c.delete_all()
    assert [v for c in clients for v in c.violations] == []
    assert chaos.at_rest(cluster, clients, timeout=60) == []
    # And a whole instance life leaves Placement and the database as it found them.
    flows.boot_delete_cycle(cluster, cluster.hosts[0])

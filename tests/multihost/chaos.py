"""The chaos machinery of tests/multihost/test_chaos.py and bench/recovery.py: a
multi-host deployment whose conductor runs its periodic repairs often, the faults
(kill -9 of a process, a backing service stopped) and Nova-like clients that
tolerate outages the way Nova does (retry on 503 and connection errors) and record
what Steward acknowledged, then the invariants that must hold at rest.

A fault is ``inject`` (the process killed, the service stopped) then, after the
scheduled down time, ``heal`` (what a supervisor would do: systemd restarting the
unit, an operator's ``systemctl start``). Nothing else is restarted: whatever the
fault left behind, Steward must repair by itself.
"""
import os
import random
import signal
import subprocess
import threading
import time
import uuid

import httpx

from steward.placement import handle as embedded
from tests.multihost import cluster as cluster_mod
from tests.multihost import flows

FAULT_KINDS = ('conductor', 'api_worker', 'api', 'agent', 'placement', 'rabbitmq',
               'postgresql')
SEED_ENV, ROUNDS_ENV = 'STEWARD_CHAOS_SEED', 'STEWARD_CHAOS_ROUNDS'
DEFAULT_SEED, DEFAULT_ROUNDS = 20261127, 7
#: Nova's [DEFAULT] arq_binding_timeout: how long nova-compute waits for the bind.
BIND_TIMEOUT = 300
#: How long a client keeps retrying one call before it calls it a violation: far
#: beyond any scheduled outage, only reached when something never heals.
GIVE_UP = 300
#: A single call slower than this is noted for the report (not a failure).
SLOW = 10


def seed_and_rounds():
    return (int(os.environ.get(SEED_ENV, DEFAULT_SEED)),
            int(os.environ.get(ROUNDS_ENV, DEFAULT_ROUNDS)))


class ChaosCluster(cluster_mod.Cluster):
    """The multi-host deployment of the issue: one conductor, two API workers,
    agents on two hosts. Its conductor runs the periodic tasks every 2 s (not 60 s)
    so that the repairs of doc/troubleshooting.md "What heals itself" show within
    the test's few minutes; they are the same repairs."""
    netns_tag = 'c'

    def __init__(self, **kw):
        kw.setdefault('hosts', ('ch-a', 'ch-b'))
        kw.setdefault('conductors', 1)
        super().__init__(**kw)

    def write_conf(self, name, sections):
        if name.startswith('conductor-'):
            sections['conductor'] = {'periodic_interval': 2, 'stale_delete_grace': 5,
                                     'cleanup_resend_interval': 5}
        return super().write_conf(name, sections)

    # -- the faults -------------------------------------------------------------------
    def placement_pids(self):
        out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(self.placement.pid)],
                             capture_output=True, text=True).stdout
        return [self.placement.pid] + [int(p) for p in out.split()]

    def kill_placement(self):
        for pid in self.placement_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.placement.wait_exit()

    def start_placement(self):
        port = int(self.placement_url.rsplit(':', 1)[1].rstrip('/'))
        deadline = time.monotonic() + 60
        while True:
            # The killed workers may still hold the port for a moment.
            try:
                self.placement = embedded.start_subprocess(
                    f'sqlite:///{self.base}/placement.sqlite', '127.0.0.1', port,
                    log_file=str(self.base / 'placement.log'), timeout=60)
                return
            except Exception:  # noqa: BLE001 - retried, then raised
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def postgresql_immediate_shutdown(self):
        srv = self.pg
        srv._as_owner([os.path.join(srv.bindir, 'pg_ctl'), '-D', srv.datadir, '-m',
                       'immediate', '-w', 'stop'])


def inject(cluster, kind, rng):
    """Start fault ``kind``; returns what ``heal`` needs."""
    if kind == 'conductor':
        victim = rng.choice(cluster.conductors)
        victim.kill()
        return victim
    if kind == 'api_worker':
        # Right after the API's own restart gunicorn may not have forked them yet.
        deadline = time.monotonic() + 120
        while len(cluster.api_worker_pids()) < cluster.api_workers:
            assert time.monotonic() < deadline, 'the API never had its workers'
            time.sleep(0.1)
        victim = rng.choice(sorted(cluster.api_worker_pids()))
        os.kill(victim, signal.SIGKILL)
        return victim
    if kind == 'api':
        cluster.api.kill()
        return cluster.api
    if kind == 'agent':
        victim = cluster.agents[rng.choice(cluster.hosts)]
        victim.kill()
        return victim
    if kind == 'placement':
        cluster.kill_placement()
        return None
    if kind == 'rabbitmq':
        cluster.rabbit.stop()
        return None
    if kind == 'postgresql':
        cluster.postgresql_immediate_shutdown()
        return None
    raise ValueError(kind)


def heal(cluster, kind, victim):
    """End fault ``kind``: the killed process started again (an API worker: by
    gunicorn itself, which is waited for), the stopped service started."""
    if kind in ('conductor', 'api', 'agent'):
        victim.start()
    elif kind == 'api_worker':
        deadline = time.monotonic() + 120
        while victim in cluster.api_worker_pids() or \
                len(cluster.api_worker_pids()) < cluster.api_workers:
            assert time.monotonic() < deadline, 'gunicorn never replaced its worker'
            time.sleep(0.1)
    elif kind == 'placement':
        cluster.start_placement()
    elif kind == 'rabbitmq':
        cluster.rabbit.start()
    elif kind == 'postgresql':
        cluster.start_database()
    else:
        raise ValueError(kind)


def schedule(seed, rounds):
    """[(kind, gap before the fault s, down time s)]: every kind once per seven
    rounds, in an order and with times drawn from ``seed``."""
    rng = random.Random(seed)
    out = []
    while len(out) < rounds:
        kinds = list(FAULT_KINDS)
        rng.shuffle(kinds)
        for kind in kinds[:rounds - len(out)]:
            out.append((kind, round(rng.uniform(0.5, 3.0), 2),
                        round(rng.uniform(0.5, 4.0), 2)))
    return out


# -- the clients ----------------------------------------------------------------------
class Pool:
    """The PCI devices, each used by one client's instance at a time (what
    Nova's scheduler would pick)."""

    def __init__(self, cluster):
        self.lock = threading.Lock()
        self.free = [(h, cluster.pci_rp(h, a)) for h in cluster.hosts
                     for a in cluster_mod.PCI_ADDRESSES]

    def take(self, rng):
        with self.lock:
            if not self.free:
                return None
            return self.free.pop(rng.randrange(len(self.free)))

    def give(self, dev):
        with self.lock:
            self.free.append(dev)


class GaveUp(Exception):
    pass


class Client:
    """One Nova: boots (claim, create, bind, wait) and deletes instances, retrying
    what fails for a cause that passes, recording what Steward acknowledged."""

    def __init__(self, cluster, pool, index, seed):
        self.cluster, self.pool, self.name = cluster, pool, f'client-{index}'
        self.rng = random.Random(seed * 1000 + index)
        self.live = {}            # instance -> (arq uuid, host, rp): acknowledged Bound
        self.deleted = set()      # ARQ uuids whose delete answered 204
        self.uncertain_creates = 0
        self.violations = []      # 5xx other than 503, calls that never succeeded
        self.booted = self.failed_boots = self.refused_claims = 0
        self.statuses = {}        # (status or error) -> count, for the report
        self.unavailable = []     # (monotonic time, what) of each 503 answer
        self.boot_times = []      # monotonic times of acknowledged boots
        self.failures = []        # why each failed boot failed, for the report
        self.pause = (0.2, 0.5)   # between retries, as Nova's clients wait
        self.slow = []            # (what, answer, seconds) of calls over SLOW s
        # Every answer: (sent, answered) monotonic times, what, status or error name.
        self.answers = []
        self.stop = threading.Event()
        # Set: the client waits between two operations (``idle`` set meanwhile),
        # so that the deployment can be checked at rest (``hold``, ``resume``).
        self.held, self.idle = threading.Event(), threading.Event()
        # Set: a call in progress stops retrying (the client gives up at once).
        self.abandon = threading.Event()
        self.thread = None

    # -- calls ------------------------------------------------------------------------
    def _count(self, key):
        self.statuses[key] = self.statuses.get(key, 0) + 1

    def _pause(self):
        time.sleep(self.rng.uniform(*self.pause))

    def _retrying(self, send, what, on_unknown=None):
        """``send()`` until it answers something other than 503 (or another 5xx,
        recorded as a violation) or a connection error. ``on_unknown()`` for each
        try whose outcome is unknown: the request sent and its answer lost, or a
        503 (the database lost during the commit, which may have happened)."""
        started = time.monotonic()
        while True:
            sent = time.monotonic()
            try:
                r = send()
            except httpx.TransportError as exc:
                self._note_slow(what, type(exc).__name__, sent)
                self._count(type(exc).__name__)
                self.answers.append((sent, time.monotonic(), what, type(exc).__name__))
                # Refused or never connected: the request was not sent.
                if on_unknown and not isinstance(exc, (httpx.ConnectError,
                                                       httpx.ConnectTimeout)):
                    on_unknown()
            else:
                self._note_slow(what, r.status_code, sent)
                self._count(r.status_code)
                self.answers.append((sent, time.monotonic(), what, r.status_code))
                if r.status_code < 500:
                    return r
                if r.status_code != 503:
                    self.violations.append(f'{what}: {r.status_code} {r.text[:300]}')
                else:
                    self.unavailable.append((time.monotonic(), what))
                if on_unknown:
                    on_unknown()
            if self.abandon.is_set():
                raise GaveUp(what)
            if time.monotonic() - started > GIVE_UP:
                self.violations.append(f'{what}: no answer but 503 or errors for '
                                       f'{GIVE_UP} s')
                raise GaveUp(what)
            self._pause()

    def _note_slow(self, what, answer, sent):
        took = time.monotonic() - sent
        if took > SLOW:
            self.slow.append((what, answer, round(took, 1)))

    def api(self, method, path, what, **kw):
        def send():
            with self.cluster.api_client(timeout=120) as api:
                return api.request(method, path, **kw)
        return self._retrying(send, what, kw.pop('on_unknown', None))

    def placement(self, method, path, what, **kw):
        def send():
            # The URL is read again each time: Placement may have been restarted.
            with self.cluster.placement_client() as p:
                return p.request(method, path, **kw)
        return self._retrying(send, what)

    # -- Nova's flows -----------------------------------------------------------------
    def claim(self, instance, host, rp):
        body = {'allocations': {self.cluster.compute_rps[host]: {'resources': {'VCPU': 1}},
                                rp: {'resources': {cluster_mod.PCI_RC: 1}}},
                'project_id': 'mh-project', 'user_id': 'mh-user',
                'consumer_generation': None, 'consumer_type': 'INSTANCE'}
        r = self.placement('PUT', f'/allocations/{instance}', 'claim', json=body)
        if r.status_code == 204:
            return True
        # A claim written before its answer was lost: the consumer exists.
        r = self.placement('GET', f'/allocations/{instance}', 'claim check')
        return rp in r.json().get('allocations', {})

    def unclaim(self, instance):
        r = self.placement('DELETE', f'/allocations/{instance}', 'unclaim')
        assert r.status_code in (204, 404), r.text

    def arq(self, arq_uuid):
        r = self.api('GET', f'/v2/accelerator_requests/{arq_uuid}', 'ARQ show')
        return r.json() if r.status_code == 200 else None

    def boot(self, dev):
        """One boot on ``dev``; True when Steward acknowledged it Bound."""
        host, rp = dev
        instance = str(uuid.uuid4())
        if not self.claim(instance, host, rp):
            self.refused_claims += 1      # Nova's scheduler would pick another host
            return False
        lost = []
        r = self.api('POST', '/v2/accelerator_requests', 'ARQ create',
                     json={'device_profile_name': flows.PCI_PROFILE},
                     on_unknown=lambda: lost.append(1))
        self.uncertain_creates += len(lost)
        assert r.status_code == 201, r.text
        arq = r.json()['arqs'][0]['uuid']
        body = flows.bind_body([{'uuid': arq}], host, rp, instance)
        state = self._bind(arq, body, instance)
        if state == 'Bound':
            self.live[instance] = (arq, host, rp)
            self.booted += 1
            self.boot_times.append(time.monotonic())
            return True
        # Nova's clean-up of a failed boot: its ARQs deleted, its claim dropped.
        self.failed_boots += 1
        self.failures.append(f'ARQ {arq}: {state}')
        r = self.api('DELETE', '/v2/accelerator_requests', 'failed boot ARQ delete',
                     params={'arqs': arq})
        if r.status_code == 204:
            self.deleted.add(arq)
        self.unclaim(instance)
        return False

    def _bind(self, arq, body, instance):
        deadline = time.monotonic() + BIND_TIMEOUT
        while time.monotonic() < deadline:
            r = self.api('PATCH', '/v2/accelerator_requests', 'ARQ bind', json=body)
            if r.status_code != 202:
                self.failures.append(f'bind of {arq}: {r.status_code} {r.text[:200]}')
                # A bind applied before its answer was lost, or refused: what the
                # ARQ says decides.
                got = self.arq(arq)
                if got is None or got['state'] not in ('Initial', 'BindStarted', 'Bound'):
                    return got and got['state']
                if got['state'] == 'Initial':
                    continue
            while time.monotonic() < deadline:
                r = self.api('GET', '/v2/accelerator_requests', 'bind wait',
                             params={'instance': instance, 'bind_state': 'resolved'})
                if r.status_code == 200:
                    states = [a['state'] for a in r.json()['arqs']]
                    return states[0] if states else None
                if r.status_code != 423:
                    got = self.arq(arq)
                    return got and got['state']
                time.sleep(0.1)
        self.violations.append(f'ARQ {arq}: bind not resolved in {BIND_TIMEOUT} s')
        return None

    def delete(self, instance):
        arq, host, rp = self.live.pop(instance)
        r = self.api('DELETE', '/v2/accelerator_requests', 'ARQ delete',
                     params={'instance': instance})
        assert r.status_code == 204, r.text
        self.deleted.add(arq)
        self.unclaim(instance)
        self.pool.give((host, rp))

    def run(self):
        try:
            while not self.stop.is_set():
                if self.held.is_set():
                    while self.held.is_set() and not self.stop.is_set():
                        self.idle.set()
                        self.stop.wait(0.05)
                    self.idle.clear()
                    continue
                if self.live and (self.rng.random() < 0.5 or len(self.live) > 1):
                    self.delete(next(iter(self.live)))
                    continue
                dev = self.pool.take(self.rng)
                if dev is None:
                    self._pause()
                    continue
                if not self.boot(dev):
                    self.pool.give(dev)
        except GaveUp:
            pass
        except Exception as exc:  # noqa: BLE001 - reported as a violation
            self.violations.append(f'{self.name} died: {exc!r}')
        finally:
            self.idle.set()         # a client that ended holds nothing either

    def start(self):
        self.thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def join(self):
        self.stop.set()
        self.thread.join()

    def hold(self):
        """Ask the client to wait after its current operation; ``idle`` says when
        it does."""
        self.held.set()

    def resume(self):
        self.idle.clear()
        self.held.clear()

    def delete_all(self):
        for instance in list(self.live):
            self.delete(instance)


# -- the invariants at rest -----------------------------------------------------------
def _handle(arq):
    info = arq.get('attach_handle_info') or {}
    return (arq['hostname'],) + tuple(sorted(info.items()))


def violations_at_rest(cluster, clients):
    """What is wrong with the deployment at rest, given what the clients were
    told: [] when every invariant holds."""
    out = []
    with cluster.api_client() as api:
        r = api.get('/v2/accelerator_requests')
        if r.status_code != 200:
            return [f'ARQ list answered {r.status_code}']
        arqs = {a['uuid']: a for a in r.json()['arqs']}
        devices = api.get('/v2/devices', headers={
            'OpenStack-API-Version': 'accelerator latest'}).json()['devices']
    live = {arq: (inst, host, rp) for c in clients
            for inst, (arq, host, rp) in c.live.items()}
    deleted = set().union(*(c.deleted for c in clients))
    for arq, (inst, host, rp) in live.items():
        a = arqs.get(arq)
        if a is None:
            out.append(f'lost: acknowledged ARQ {arq} of {inst}')
        elif (a['state'], a['instance_uuid'], a['device_rp_uuid'], a['hostname']) != \
                ('Bound', inst, rp, host):
            out.append(f'changed: ARQ {arq} is {a["state"]} {a["instance_uuid"]} '
                       f'{a["device_rp_uuid"]}, acknowledged Bound {inst} {rp}')
    for arq in sorted(deleted & set(arqs)):
        out.append(f'resurrected: ARQ {arq} ({arqs[arq]["state"]}) was deleted')
    unknown = [a for u, a in arqs.items() if u not in live and u not in deleted]
    stray = [a for a in unknown if a['state'] != 'Initial' or a['instance_uuid']]
    for a in stray:
        out.append(f'unknown ARQ {a["uuid"]} in {a["state"]} ({a["instance_uuid"]})')
    lost_answers = sum(c.uncertain_creates for c in clients)
    if len(unknown) - len(stray) > lost_answers:
        out.append(f'{len(unknown) - len(stray)} unknown Initial ARQs for '
                   f'{lost_answers} creates whose answer was lost')
    for a in arqs.values():
        if a['state'] in flows.TRANSIENT_ARQ_STATES:
            out.append(f'transitional: ARQ {a["uuid"]} {a["state"]}')
    bound = [a for a in arqs.values() if a['state'] == 'Bound']
    for key in ('device_rp_uuid', None):
        seen = {}
        for a in bound:
            k = a[key] if key else _handle(a)
            if k in seen:
                out.append(f'held twice: {k} by {seen[k]} and {a["uuid"]}')
            seen[k] = a['uuid']
    bound_rps = {a['device_rp_uuid'] for a in bound}
    for d in devices:
        if d.get('device_state') in flows.TRANSIENT_DEVICE_STATES + ('error',):
            out.append(f'device {d["uuid"]} {d["device_state"]}')
    for host in cluster.hosts:
        names = {f'{host}_{addr}': addr for addr in cluster_mod.PCI_ADDRESSES}
        state = {addr: d.get('device_state') for d in devices
                 for addr in cluster_mod.PCI_ADDRESSES
                 if d['hostname'] == host and addr in str(d['std_board_info'])}
        tree = cluster.placement_tree(host)
        for name, addr in names.items():
            rp = cluster.pci_rp(host, addr)
            want = 1 if rp in bound_rps else 0
            if name not in tree:
                out.append(f'provider {name} missing from Placement')
                continue
            inv, _traits, usages = tree[name]
            if usages.get(cluster_mod.PCI_RC, 0) != want:
                out.append(f'{name}: Placement usage {usages} for {want} Bound ARQs')
            reserved = inv.get(cluster_mod.PCI_RC, {}).get('reserved')
            if reserved != want:
                out.append(f'{name}: Placement reserved {reserved}, Steward holds '
                           f'{want} (out of service)' if not want else
                           f'{name}: reserved {reserved} while bound')
            expected_state = 'allocated' if want else 'available'
            if state.get(addr) != expected_state:
                out.append(f'{name}: device {state.get(addr)}, expected {expected_state}')
    return out


def wait_at_rest(cluster, clients, timeout, interval=0.5):
    """``violations_at_rest`` until there are none or ``timeout`` s have passed
    (the periodic repairs may still be at work); returns the last ones."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = violations_at_rest(cluster, clients)
        except Exception as exc:  # noqa: BLE001 - a service still coming back
            found = [f'reading the deployment: {exc!r}']
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(interval)


def allocations_of_live(cluster, clients):
    """Each acknowledged instance's claim still in Placement."""
    out = []
    with cluster.placement_client() as p:
        for c in clients:
            for inst, (_arq, _host, rp) in c.live.items():
                got = p.get(f'/allocations/{inst}').json().get('allocations', {})
                if rp not in got:
                    out.append(f'instance {inst}: no allocation of {rp}')
    return out

"""A rolling upgrade from the previous release (tests/fixtures/previous_release.py)
to this tree in the multi-host deployment, under Nova-like load, as
doc/multihost.md orders it (issue 37, item 1), on PostgreSQL and on MariaDB
(``previous_release.DATABASES``):

1. the previous release runs everything (its db sync, two conductors, the API
   with two workers, an agent per host; ``[database] sync_on_startup = false`` as
   the guide says to set on it); an instance is bound on the first host from the
   start to the end, and Nova-like clients (tests/multihost/chaos.py's, retrying
   503 and refused connections as Nova does) boot and delete instances on the
   other devices from then on;
2. this tree's ``steward-manage db sync`` runs under it; an old conductor is then
   restarted on the new schema and serves;
3. the conductors are replaced one by one, then the API, then the agents; the API
   and the agents of this tree run with ``[upgrade_levels]`` capped at the
   previous release's versions (``previous_release.RPC_CAPS``: conductor 1.1; the
   conductors need no cap, the agent RPC did not change) while a service of the
   previous release shares the bus (the last agent, replacing the last old
   service, starts without caps);
4. the caps are removed (the API, then the capped agent, restarted without them),
   the online data migrations run, ``steward-status upgrade check`` passes.

Each step is done while the clients run; the step ends once every client has
acknowledged a boot since it began, then the clients are held between two
operations and the deployment is checked at rest (chaos.violations_at_rest): no
acknowledged ARQ lost or changed, none deleted come back, none in a transitional
state, no device or attach handle held twice, Placement's usages and reservations
equal to the Bound ARQs, every acknowledged claim still in Placement, no service
of either release exited. Over the whole run, every answer is recorded with its
time: no 5xx but 503, and a 503 or a refused or cut connection only within a
service's restart window (from its stop to the new process found ready, polled,
plus ``MARGIN``). Who bound each device (device_history.actor) is read per step:
conductors while the API is capped, the API itself once the caps are gone.

The same deployment with a column the previous release reads dropped right after
db sync (a contract step applied too early) fails the step's checks.
"""
import collections
import os
import subprocess
import time

import httpx
import pytest
import sqlalchemy as sa

from tests.fixtures import previous_release
from tests.fixtures import requirements
from tests.multihost import chaos
from tests.multihost import cluster as cluster_mod
from tests.multihost import flows

pytestmark = pytest.mark.slow
NEW = cluster_mod.BIN
HOSTS = ('up-a', 'up-b')
CLIENTS = 2
#: How long after a restarted service was found ready (polled every 0.2 s) an
#: answer of unavailability still counts as that restart's: the poll's own period
#: and an answer already on its way.
MARGIN = 2.0
#: [DEFAULT] rpc_response_timeout(_bind) of every service (default 60 s). A
#: conductor of the previous release stopped by SIGTERM loses the RPC calls
#: RabbitMQ delivers to it after its listener stopped polling (its consumer is not
#: cancelled at the broker; its log shows "received message msg_id: ..." while it
#: closes its connection, after "[connection close] Deleting fanout queue"):
#: neither it nor the other conductor runs them (this release cancels its
#: consumers first: steward.common.rpc.stop_server). The caller (the API, an
#: agent's report) gets its answer when this runs out: the API answers 503. 15 s keeps each such call
#: within its restart's window at a quarter of the default's cost, and far above
#: any call's normal time (well under a second; the report lists calls over 10 s).
RPC_TIMEOUT = 15
#: How long a step may take to see every client boot once (a bind is resolved in
#: well under a second on an idle deployment).
STEP_TIMEOUT = 180


@pytest.fixture(scope='module')
def previous_bin():
    try:
        return os.path.join(previous_release.ensure(), 'bin')
    except previous_release.BuildError as err:
        requirements.need('pypi', f'the previous release\'s side venv: {err}')


def _unavailable(answer):
    """A 503 or a connection refused, cut or never answered."""
    return answer == 503 or isinstance(answer, str)


class Upgrade:
    """The previous release's deployment under load, upgraded step by step, and
    the timeline of the run: the steps, each restart's window, who bound what."""

    def __init__(self, previous_bin, database, size, tag):
        cluster_mod.require(database)
        self.previous_bin = previous_bin
        self.cluster = cluster_mod.Cluster(
            hosts=HOSTS, conductors=size, api_workers=size, database=database,
            bin_dir=previous_bin, extra_conf={
                'database': {'sync_on_startup': 'false'},
                # A call delivered to a conductor as it stops is lost (both
                # releases; the caller's RPC timeout ends it: see RPC_TIMEOUT).
                'DEFAULT': {'rpc_response_timeout': RPC_TIMEOUT,
                            'rpc_response_timeout_bind': RPC_TIMEOUT}},
            # The previous release has psycopg2 and PyMySQL only; the new one
            # reads them too.
            pg_driver='psycopg2', mysql_driver='pymysql')
        # Named apart from the session's own deployments of this test process.
        self.cluster.netns_tag = tag
        self.clients, self.keeper, self.engine = [], None, None
        self.steps = []         # (name, monotonic start, each client's boots then)
        self.windows = []       # (service, stop started, new process ready)
        self.actors = {}        # step -> {device_history.actor of binds: count}
        self.sync_conf = None
        self._history_seen = 0

    # -- the deployment and its load ------------------------------------------------
    def start(self):
        c = self.cluster.start()
        self.engine = sa.create_engine(c.db_url)
        self.sync_conf = c.write_conf('db-sync', c.common_conf('db-sync', 'mh-sync'))
        self._history_seen = self._history_max()
        with c.api_client() as api:
            flows.ensure_profile(api)
            rp = c.pci_rp(HOSTS[0])
            instance, arqs = flows.boot(c, api, HOSTS[0], rp)
        pool = chaos.Pool(c)
        pool.free.remove((HOSTS[0], rp))
        # What Steward acknowledged before the clients: checked like theirs.
        self.keeper = chaos.Client(c, pool, 99, 0)
        self.keeper.live[instance] = (arqs[0]['uuid'], HOSTS[0], rp)
        self.clients = [chaos.Client(c, pool, i, 37) for i in range(CLIENTS)]
        self.step('the previous release')
        for client in self.clients:
            client.start()
        return self

    def stop(self):
        for client in self.clients:
            client.abandon.set()
            if client.thread is not None:
                client.join()
        if self.engine is not None:
            self.engine.dispose()
        self.cluster.stop()

    # -- the steps -------------------------------------------------------------------
    def step(self, name):
        self.steps.append((name, time.monotonic(),
                           [client.booted for client in self.clients]))

    def manage(self, *argv, tool='steward-manage'):
        out = subprocess.run([os.path.join(NEW, tool), *argv, '--config-file',
                              self.sync_conf], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def revision(self):
        with self.engine.connect() as conn:
            return conn.execute(sa.text('SELECT version_num FROM alembic_version')).scalar()

    def capped(self, svc):
        """``svc``'s configuration with [upgrade_levels] at the previous release's
        RPC versions (a copy of its file)."""
        path = svc.conf_path.replace('.conf', '-capped.conf')
        with open(svc.conf_path) as f:
            text = f.read()
        with open(path, 'w') as f:
            f.write(text + cluster_mod._ini({'upgrade_levels': previous_release.RPC_CAPS}))
        return path

    def restart(self, old, conf_path=None, bin_dir=NEW):
        """``old`` stopped (SIGTERM: calls in flight finish) and started again from
        ``bin_dir`` on ``conf_path`` (its own by default), same log; returns once
        the new process serves (a conductor or agent consuming its queue, the API
        answering), and records the window."""
        c = self.cluster
        started = time.monotonic()
        old.stop()
        new = cluster_mod.Service(old.name, old.role, conf_path or old.conf_path,
                                  old.log_path, netns=old.netns, env=old.env,
                                  bin_dir=bin_dir)
        if old.role == 'conductor':
            c.conductors[c.conductors.index(old)] = new
            ready = lambda: c.rabbit.consumers('steward-conductor') == len(c.conductors)  # noqa: E731
        elif old.role == 'api':
            c.api = new
            ready = c.api_answers
        else:
            host = next(h for h, svc in c.agents.items() if svc is old)
            c.agents[host] = new
            ready = lambda: c.rabbit.consumers(f'steward-agent.{host}') == 1  # noqa: E731
        new.start()
        c.wait_for(ready, f'{new.name} serving again', timeout=120)
        self.windows.append((new.name, started, time.monotonic()))
        return new

    def check(self, name, timeout=STEP_TIMEOUT):
        """The end of step ``name``: every client has acknowledged a boot since the
        step began (within ``timeout``); then, the clients held between two
        operations, the deployment at rest holds every invariant; the clients go
        on."""
        self.step_done(name, timeout)
        c = self.cluster
        try:
            problems = []
            deadline = time.monotonic() + STEP_TIMEOUT
            for client in self.clients:
                client.hold()
            while not all(client.idle.is_set() for client in self.clients):
                problems = [v for client in self.clients for v in client.violations] + [
                    f'unavailable outside a restart: {u}' for u in self.unexplained()]
                if problems or time.monotonic() > deadline:
                    problems.append('the clients did not finish their operations')
                    break
                time.sleep(0.1)
            problems += [f'{svc.name} exited' for svc in c.services() if not svc.alive()]
            if not problems:
                problems += [v for client in self.clients for v in client.violations]
                problems += [f'unavailable outside a restart: {u}'
                             for u in self.unexplained()]
                everyone = self.clients + [self.keeper]
                problems += chaos.wait_at_rest(c, everyone, timeout=60)
                problems += chaos.allocations_of_live(c, everyone)
            self.actors[name] = self._binders()
            assert problems == [], f'{name}:\n' + '\n'.join(problems) + '\n' + \
                c.logs_tail()
        finally:
            for client in self.clients:
                client.resume()

    def step_done(self, name, timeout):
        """Wait until every client has acknowledged a boot since step ``name``
        began (the load went on through it), or one met a violation."""
        _name, start, booted = self.steps[-1]
        assert _name == name, (self.steps[-1], name)
        try:
            self.cluster.wait_for(
                lambda: self.unexplained() or all(
                    client.booted > before or client.violations
                    for client, before in zip(self.clients, booted)),
                f'a boot of every client in step {name!r}', timeout=timeout)
        except RuntimeError as exc:
            since = collections.Counter(a[3] for a in self.answers() if a[0] >= start)
            raise AssertionError(f'{name}: not every client booted within {timeout} s; '
                                 f'answers meanwhile {dict(since)}\n{exc}') from None

    def _history_max(self):
        with self.engine.connect() as conn:
            return conn.execute(sa.text('SELECT COALESCE(MAX(id), 0) FROM device_history')
                                ).scalar()

    def _binders(self):
        """Who made the devices' binds (available -> allocated) since the last call."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT id, actor FROM device_history WHERE id > :seen AND "
                "target_state = 'allocated'"), {'seen': self._history_seen}).all()
        self._history_seen = max([self._history_seen] + [r[0] for r in rows])
        return dict(collections.Counter(r[1] for r in rows))

    # -- the record ------------------------------------------------------------------
    def answers(self):
        return sorted(a for client in self.clients for a in client.answers)

    def step_of(self, sent):
        return [name for name, start, _ in self.steps if start <= sent][-1]

    def unexplained(self):
        """Answers of unavailability outside every restart window."""
        return [(round(sent - self.steps[0][1], 2), self.step_of(sent), what, answer)
                for sent, answered, what, answer in self.answers()
                if _unavailable(answer) and not any(
                    sent <= ready + MARGIN and answered >= start
                    for _svc, start, ready in self.windows)]

    def report(self):
        per_step = collections.OrderedDict((name, collections.Counter())
                                           for name, _s, _b in self.steps)
        for sent, _answered, _what, answer in self.answers():
            per_step[self.step_of(sent)][answer] += 1
        t0 = self.steps[0][1]
        lines = [f'{self.cluster.database}: {sum(c.booted for c in self.clients)} boots '
                 f'acknowledged, {sum(c.failed_boots for c in self.clients)} failed and '
                 f'cleaned up, {sum(c.uncertain_creates for c in self.clients)} creates '
                 f'unanswered']
        ends = [start for _n, start, _b in self.steps[1:]] + [time.monotonic()]
        for (name, counts), (_n, start, _b), end in zip(per_step.items(), self.steps, ends):
            lines.append(f'  {name} ({start - t0:.0f}-{end - t0:.0f} s): '
                         f'{sum(counts.values())} answers '
                         f'{dict(sorted(counts.items(), key=str))}; binds by '
                         f'{self.actors.get(name)}')
        for what, answer, took in [x for c in self.clients for x in c.slow]:
            lines.append(f'  slow call: {what} answered {answer} after {took} s')
        for svc, start, ready in self.windows:
            n = sum(1 for sent, answered, _w, answer in self.answers()
                    if _unavailable(answer) and sent <= ready + MARGIN and answered >= start)
            lines.append(f'  window {svc}: {start - t0:.1f}-{ready - t0:.1f} s, '
                         f'{n} answers of unavailability')
        return '\n'.join(lines)


def _upgrade(run):
    """The whole upgrade of doc/multihost.md "Rolling upgrades", step by step."""
    c = run.cluster
    assert run.revision() == previous_release.SCHEMA
    run.check('the previous release')

    run.step('db sync under the previous release')
    run.manage('db', 'sync')
    from steward.db import migration
    assert run.revision() == migration.head_revision() != previous_release.SCHEMA
    run.check('db sync under the previous release')

    run.step('an old conductor restarted on the new schema')
    run.restart(c.conductors[-1], bin_dir=run.previous_bin)
    run.check('an old conductor restarted on the new schema')

    # (Conductors need no cap: they send agent RPC, which the release did not
    # change; the API and the agents send conductor RPC.)
    for i in range(len(c.conductors)):
        run.step(f'conductor {i + 1} replaced')
        run.restart(c.conductors[i])
        run.check(f'conductor {i + 1} replaced')

    uncapped = {}

    run.step('the API replaced')
    uncapped['api'] = c.api.conf_path
    run.restart(c.api, conf_path=run.capped(c.api))
    run.check('the API replaced')

    for host in HOSTS:
        run.step(f'agent {host} replaced')
        old = c.agents[host]
        if host != HOSTS[-1]:
            uncapped[old.name] = old.conf_path
            run.restart(old, conf_path=run.capped(old))
        else:
            run.restart(old)        # the last service of the previous release
        run.check(f'agent {host} replaced')

    run.step('the caps removed')
    log_at = c.api.log_size()
    run.restart(c.api, conf_path=uncapped['api'])
    for svc in list(c.agents.values()):
        if svc.name in uncapped:
            run.restart(svc, conf_path=uncapped[svc.name])
    run.check('the caps removed')
    # The API runs the accelerator requests' operations itself now.
    assert set(run.actors['the caps removed']) == {'api mh-ctl-api'}, run.actors
    assert 'by this API process itself' in c.api.log_since(log_at)

    run.step('online data migrations')
    run.manage('db', 'online_data_migrations')
    run.manage('upgrade', 'check', tool='steward-status')
    run.check('online data migrations')
    # While capped, or older, the API sent them to the conductors.
    for name in ('the previous release', 'conductor 2 replaced', 'the API replaced',
                 f'agent {HOSTS[-1]} replaced'):
        assert run.actors[name] and all(a.startswith('conductor ')
                                        for a in run.actors[name]), run.actors


@pytest.mark.parametrize('database', previous_release.DATABASES)
def test_rolling_upgrade_from_the_previous_release(previous_bin, database, capsys):
    started = time.monotonic()
    run = Upgrade(previous_bin, database, 2, 'u' if database == 'postgresql' else 'y')
    try:
        run.start()
        _upgrade(run)
        for client in run.clients:
            client.join()
        assert [v for client in run.clients for v in client.violations] == []
        assert run.unexplained() == []
        for client in run.clients + [run.keeper]:
            client.delete_all()
        assert chaos.wait_at_rest(run.cluster, run.clients + [run.keeper], timeout=60) == []
    finally:
        with capsys.disabled():
            print(f'\nrolling upgrade, {time.monotonic() - started:.0f} s: '
                  f'{run.report()}', flush=True)
        run.stop()


def test_a_contract_step_applied_early_fails_the_upgrade(previous_bin):
    """The same deployment of the previous release under the same load, with a
    migration that drops a column it reads (devices.last_error) applied after this
    tree's db sync: the step's checks fail, as they must for a migration that
    breaks the rule of doc/contributor/schema-changes.md. On PostgreSQL the old
    code's binds answer 500. (On MariaDB it takes the server's "Unknown column"
    for a lost connection and answers 503, outside any restart, and no boot
    succeeds any more: the same failure of the checks, 40 s of CI for no other
    line of code, so run on one database.)"""
    run = Upgrade(previous_bin, 'postgresql', 1, 'w')
    try:
        run.start()
        run.check('the previous release')
        run.step('db sync')
        run.manage('db', 'sync')
        with run.engine.begin() as conn:
            conn.execute(sa.text('ALTER TABLE devices DROP COLUMN last_error'))
        # The step begins at the drop: the boots acknowledged while the (slower on
        # MariaDB) db sync ran must not count as the load going on after it.
        run.step('a column dropped')
        with pytest.raises(AssertionError) as failed:
            run.check('a column dropped', timeout=60)
        violations = [v for client in run.clients for v in client.violations]
        assert violations or run.unexplained(), str(failed.value)[:3000]
        with httpx.Client(base_url=run.cluster.api_url, timeout=60) as api:
            assert api.get('/v2/devices').status_code in (500, 503)
        assert 'last_error' in run.cluster.conductors[0].log()
    finally:
        run.stop()

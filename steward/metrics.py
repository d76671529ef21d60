"""Prometheus metrics of one Steward process (prometheus-client); doc/metrics.md
lists them all.

Two kinds:

* read when scraped, by the collectors below, so they are right whichever process
  changed the state: devices by type/state/host and ARQs by state (one GROUP BY
  query each), the request counters of this process's conductor's Placement client
  (what the conductor registers with ``Metrics.register_placement_stats`` when
  it starts; this module imports nothing of the conductor), the discovery cycles of the agents
  this process runs (``AgentManager.cycles`` / ``last_cycle_seconds``);
* observed where the event happens: bind latency (the API's bind PATCH,
  ``Metrics.bind_timer``) and cleanup durations and outcomes (the conductor, when a
  cleanup ends, ``Metrics.cleanup_ended``).

One ``Metrics`` object per process, built by the command's composition root
(steward/cmd/) and handed to the API app, the conductor and the agents it runs,
owns its ``CollectorRegistry`` and the families: nothing a library registers on
prometheus_client's global registry leaks into ``/metrics``, and a standalone
agent serves a registry of its own (``serve_agent``) without the API's families.

Served at ``/metrics`` on a listener of its own, never on the API port (it has no
authentication): ``[api] metrics_listen`` for ``steward api`` and ``steward serve``
(``Metrics.serve``), ``[agent] metrics_listen`` for an agent running alone.
"""
import contextlib
import logging
import os
import threading
import time
import weakref

import prometheus_client
from prometheus_client import core
from prometheus_client import exposition
import sqlalchemy as sa

from steward.common import exception
from steward.common import netutils
from steward.common import states

LOG = logging.getLogger(__name__)

CONTENT_TYPE = exposition.CONTENT_TYPE_PLAIN_0_0_4
# The *_created series (when a label set was first seen) double every counter and
# histogram for a value nobody graphs; PromQL's rate() does not need them. A switch
# of prometheus_client for the whole process, set once at import.
prometheus_client.disable_created_metrics()

# Nova's bind is one PATCH for all ARQs of an instance: ~4 ms p50 on one host with the
# fake driver (bench/arq_lifecycle.py), tens of ms when Placement is written, and
# the RPC timeout of a bind is 60 s.
BIND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A crypto sanitize takes seconds, zeroing a large drive hours.
CLEANUP_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400,
                   28800, 86400)

BIND_OUTCOMES = ('bound', 'failed')
CLEANUP_OUTCOMES = ('succeeded', 'failed', 'late', 'interrupted', 'not_dispatched')
HEALED = ('placement_restarted', 'initial_arq_removed', 'placement_reserved',
          'placement_inventory', 'placement_traits')


# --- read when scraped --------------------------------------------------------------
class DatabaseCollector:
    """Devices and ARQs of ``database``, one GROUP BY each. An unreachable
    database costs the scrape these families, not the whole answer:
    ``steward_database_up`` says which."""

    def __init__(self, database):
        self._database = database

    def describe(self):
        return [*self._families(), self._up()]

    @staticmethod
    def _families():
        return (
            core.GaugeMetricFamily(
                'steward_devices', 'Devices by type, device_state and host '
                '(state "unset": not backfilled yet, see steward db '
                'online-data-migrations).', labels=['type', 'state', 'host']),
            core.GaugeMetricFamily(
                'steward_accelerator_requests', 'Accelerator requests (ARQs) by state.',
                labels=['state']),
            core.GaugeMetricFamily(
                'steward_device_health', 'Devices by type, health state (ok, warning, '
                'unhealthy; "unknown": never read) and host.',
                labels=['type', 'health', 'host']),
            core.GaugeMetricFamily(
                'steward_device_health_condition', '1 for each health condition a '
                'device\'s last reading holds (doc/health.md lists the codes); '
                'server: the Nova instance that holds it, empty when none.',
                labels=['device', 'type', 'host', 'code', 'severity', 'server']),
            core.GaugeMetricFamily(
                'steward_device_health_fault', '1 for each device out of service '
                'for its health until an operator brings it back.',
                labels=['device', 'type', 'host', 'state']))

    @staticmethod
    def _up():
        return core.GaugeMetricFamily(
            'steward_database_up', '1 when the queries of this scrape reached the '
            'database, 0 when they failed (the device and ARQ families are then '
            'missing).')

    def collect(self):
        from steward.db import devices as device_db
        from steward.db import models as m
        devices, arqs, by_health, conditions, faults = self._families()
        up = self._up()
        try:
            with self._database.reader() as s:
                health_rows = device_db.device_health_summary(s)
                not_ok = device_db.devices_not_healthy(s)
                dev_rows = s.execute(
                    sa.select(m.Device.type, m.Device.device_state, m.Device.hostname,
                              sa.func.count()).group_by(
                        m.Device.type, m.Device.device_state, m.Device.hostname)).all()
                arq_rows = s.execute(sa.select(m.ExtARQ.state, sa.func.count())
                                     .group_by(m.ExtARQ.state)).all()
        except Exception as err:  # noqa: BLE001 - the rest of the scrape must answer
            LOG.warning('Metrics: database queries failed: %s', err)
            up.add_metric([], 0)
            yield up
            return
        for dev_type, state, host, count in dev_rows:
            devices.add_metric([dev_type, state or 'unset', host], count)
        by_state = dict.fromkeys(states.ARQ_STORED_STATES, 0)
        by_state.update({state: count for state, count in arq_rows})
        for state, count in by_state.items():
            arqs.add_metric([state], count)
        for dev_type, health_state, host, count in health_rows:
            by_health.add_metric([dev_type, health_state or 'unknown', host], count)
        for row in not_ok:
            if row['health_fault']:
                faults.add_metric([row['uuid'], row['type'], row['hostname'],
                                   row['device_state'] or 'unset'], 1)
            for cond in row['conditions']:
                conditions.add_metric([row['uuid'], row['type'], row['hostname'],
                                       str(cond.get('code')), str(cond.get('severity')),
                                       row['instance'] or ''], 1)
        up.add_metric([], 1)
        yield devices
        yield arqs
        yield by_health
        yield conditions
        yield faults
        yield up


class PlacementCollector:
    """The Placement client of the conductor in this process, if there is one (an
    API-only process has none: no family). ``stats_provider``: a callable returning
    the client's counters (``PlacementClient.stats``) or None; by default, what a
    conductor registered (``register``).

    One conductor per process serves /metrics (tests start several: the last one
    started reports until it stops). Held weakly: a conductor dropped without
    stop() leaves the scrape instead of staying alive for it."""

    def __init__(self, stats_provider=None):
        self._provider = stats_provider
        self._registered = []
        self._lock = threading.Lock()

    def register(self, provider):
        with self._lock:
            self._registered.append(_ref(provider))

    def unregister(self, provider):
        with self._lock:
            self._registered[:] = [r for r in self._registered
                                   if r() is not None and r() != provider]

    def registered(self):
        """The provider of the last conductor registered and still alive, or None."""
        with self._lock:
            for ref in reversed(self._registered):
                provider = ref()
                if provider is not None:
                    return provider
        return None

    def describe(self):
        return list(self._families())

    @staticmethod
    def _families():
        return (core.CounterMetricFamily(
                    'steward_placement_requests', 'HTTP requests this process sent to '
                    'Placement, by kind (read: GET, write: anything else).',
                    labels=['kind']),
                core.CounterMetricFamily(
                    'steward_placement_errors', 'Placement requests that failed: no '
                    'answer, an error status (generation conflicts included: each is '
                    'retried), or an unreadable body.'))

    def collect(self):
        provider = self._provider or self.registered()
        stats = provider() if provider is not None else None
        if stats is None:
            return
        requests, errors = self._families()
        requests.add_metric(['read'], stats.get('reads', 0))
        requests.add_metric(['write'], stats.get('writes', 0))
        errors.add_metric([], stats.get('errors', 0))
        yield requests
        yield errors


def _ref(provider):
    if hasattr(provider, '__self__'):
        return weakref.WeakMethod(provider)
    return lambda: provider


class AgentCollector:
    """Discovery cycles of the agents watched (``watch``), by host. Agents are held
    weakly: a stopped, dropped agent leaves the scrape."""

    def __init__(self, agents=()):
        self._agents = weakref.WeakSet(agents)
        self._lock = threading.Lock()

    def watch(self, agent):
        with self._lock:
            self._agents.add(agent)
        return agent

    def describe(self):
        return list(self._families())

    @staticmethod
    def _families():
        return (core.CounterMetricFamily(
                    'steward_discovery_cycles', 'Discovery cycles that completed (all '
                    'drivers discovered and the report reached the conductor).',
                    labels=['host']),
                core.GaugeMetricFamily(
                    'steward_discovery_last_cycle_seconds', 'Duration of the last '
                    'completed discovery cycle, report to the conductor included.',
                    labels=['host']))

    def collect(self):
        with self._lock:
            agents = list(self._agents)
        if not agents:
            return
        cycles, last = self._families()
        for agent in agents:
            cycles.add_metric([agent.host], agent.cycles)
            if agent.last_cycle_seconds is not None:
                last.add_metric([agent.host], agent.last_cycle_seconds)
        yield cycles
        yield last


# --- an endpoint of its own (a standalone agent) ---------------------------------------
def parse_listen(value, option='[agent] metrics_listen'):
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) -> (host, port); InvalidConfiguration
    with the option's name otherwise."""
    try:
        return netutils.split_host_port(value)
    except ValueError:
        raise exception.InvalidConfiguration(
            reason=f'{option} = {value!r}: expected HOST:PORT, e.g. 127.0.0.1:9464 '
                   f'or [::1]:9464 (empty: no metrics endpoint)') from None


class MetricsServer:
    """``registry`` served on ``address`` (the value of ``option``) by a daemon
    thread; ``stop()`` closes it. Any process without the API can use it, e.g. a
    conductor serving its ``Metrics.registry``."""

    def __init__(self, address, registry, option='[agent] metrics_listen'):
        host, port = parse_listen(address, option)
        try:
            self._httpd, self._thread = prometheus_client.start_http_server(
                port, addr=host, registry=registry)
        except OSError as err:
            raise exception.InvalidConfiguration(
                reason=f'{option} = {address}: cannot listen there: '
                       f'{err.strerror or err}')
        self.host, self.port = host, self._httpd.server_address[1]

    @property
    def url(self):
        host = f'[{self.host}]' if ':' in self.host else self.host
        return f'http://{host}:{self.port}/metrics'

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# --- several processes (steward api with [api] workers > 1) ---------------------------
MULTIPROC_ENV = 'PROMETHEUS_MULTIPROC_DIR'


def _check_multiprocess():
    from prometheus_client import values
    if values.ValueClass.__name__ != 'MmapedValue' or not os.environ.get(MULTIPROC_ENV):
        raise RuntimeError(f'prometheus_client was imported before {MULTIPROC_ENV} '
                           f'was set: the workers\' metrics would stay in each worker')


def process_dead(pid):
    """A worker process exited: its live gauges leave the sums (counters and
    histograms stay counted)."""
    from prometheus_client import multiprocess
    multiprocess.mark_process_dead(pid)


class Metrics:
    """The metrics of one process: its registry, the families observed where
    things happen, and the collectors read when scraped. ``database``: the
    Database the device and ARQ families are read from (None: no such families).
    ``multiprocess``: the parent of ``steward api`` workers, serving the bind and
    cleanup families summed over every worker's files (each worker builds a
    Metrics of its own, whose observations land in those files because
    prometheus_client was imported after MULTIPROC_ENV was set)."""

    def __init__(self, database=None, multiprocess=False):
        self.registry = prometheus_client.CollectorRegistry()
        self.agents = AgentCollector()
        self.placement = PlacementCollector()
        if multiprocess:
            from prometheus_client import multiprocess as mp
            _check_multiprocess()
            mp.MultiProcessCollector(self.registry)
            # The families themselves live in the workers' files.
            families = prometheus_client.CollectorRegistry()
        else:
            families = self.registry
        self.bind_seconds = prometheus_client.Histogram(
            'steward_arq_bind_seconds',
            'Time the API took to bind the ARQs of one bind request (PATCH '
            '/v2/accelerator_requests with add operations), by outcome: bound, or '
            'failed (refused or undone; nothing stays bound).',
            ['outcome'], buckets=BIND_BUCKETS, registry=families)
        self.cleanup_seconds = prometheus_client.Histogram(
            'steward_cleanup_seconds',
            'Duration of device cleanups, from the device entering cleaning to the '
            'result reaching the conductor, by locked-in action and outcome.',
            ['action', 'outcome'], buckets=CLEANUP_BUCKETS, registry=families)
        self.cleanups = prometheus_client.Counter(
            'steward_cleanups',
            'Cleanups that ended, by action and outcome: succeeded, failed (the '
            'device went to error), late (the result came after the device left '
            'cleaning, e.g. timed out: recorded, state unchanged), interrupted (the '
            'agent restarted during it), not_dispatched (the agent is too old to be '
            'asked).', ['action', 'outcome'], registry=families)
        self.orphan_arqs = prometheus_client.Counter(
            'steward_orphan_arqs_released',
            'Bound accelerator requests the conductor deleted because Nova kept '
            'answering 404 for their instance, or saying the instance is on another '
            'host and not moving (a finished move\'s set), for longer than '
            '[conductor] orphan_grace (Nova\'s own delete of them had failed).',
            registry=families)
        self.heals = prometheus_client.Counter(
            'steward_healed',
            'Repairs Steward made by itself, by what: placement_restarted (steward '
            'serve started its embedded Placement again), initial_arq_removed (an '
            'accelerator request left Initial past [conductor] initial_arq_max_age), '
            'placement_reserved, placement_inventory and placement_traits (a '
            'provider\'s reserved, inventory or traits in Placement put back in line '
            'with Steward\'s devices).',
            ['what'], registry=families)
        # Observations straight on the children: labels() costs a lock and a
        # dict lookup per call.
        self._bind = {outcome: self.bind_seconds.labels(outcome)
                      for outcome in BIND_OUTCOMES}
        collectors = [self.placement, self.agents]
        if database is not None:
            collectors.insert(0, DatabaseCollector(database))
        for collector in collectors:
            self.registry.register(collector)
        prometheus_client.ProcessCollector(registry=self.registry)

    # -- observed where things happen ------------------------------------------------
    def record(self, kind, *values):
        """One observation: ``bind`` (outcome, seconds) or ``cleanup`` (action,
        outcome, seconds or None)."""
        if kind == 'bind':
            outcome, seconds = values
            self._bind[outcome].observe(seconds)
        elif kind == 'cleanup':
            action, outcome, seconds = values
            self.cleanups.labels(action, outcome).inc()
            if seconds is not None:
                self.cleanup_seconds.labels(action, outcome).observe(seconds)
        else:
            raise ValueError(f'unknown observation {kind!r}')

    @contextlib.contextmanager
    def bind_timer(self):
        """Time the block as one bind: ``failed`` when it raises."""
        start = time.monotonic()
        outcome = 'failed'
        try:
            yield
            outcome = 'bound'
        finally:
            self.record('bind', outcome, time.monotonic() - start)

    def cleanup_ended(self, action, outcome, started_at=None, finished_at=None):
        """Count a cleanup that ended; its duration is observed when both ends are
        known (naive UTC datetimes, as the erase records hold them)."""
        if outcome not in CLEANUP_OUTCOMES:
            raise ValueError(f'unknown cleanup outcome {outcome!r}')
        seconds = None
        if started_at is not None and finished_at is not None:
            seconds = max((finished_at - started_at).total_seconds(), 0.0)
        self.record('cleanup', action or 'none', outcome, seconds)

    def orphan_arqs_released(self, count):
        """Count ARQs the conductor's orphan check deleted."""
        self.orphan_arqs.inc(count)

    def healed(self, what, count=1):
        """Count repairs of kind ``what`` (see HEALED)."""
        if what not in HEALED:
            raise ValueError(f'unknown repair {what!r}')
        self.heals.labels(what).inc(count)

    # -- read when scraped ------------------------------------------------------------
    def register_placement_stats(self, provider):
        """``provider()`` -> the counters of this process's conductor's Placement
        client (a dict with reads, writes, errors) or None. Called by the conductor
        when it starts."""
        self.placement.register(provider)

    def unregister_placement_stats(self, provider):
        self.placement.unregister(provider)

    def watch_agent(self, agent):
        """Report ``agent``'s discovery cycles in this process's ``/metrics``."""
        return self.agents.watch(agent)

    def render(self):
        """The registry in the Prometheus text format (0.0.4)."""
        return render(self.registry)

    def serve(self, address):
        """This process's metrics (every family) on ``address``, [api]
        metrics_listen."""
        server = MetricsServer(address, self.registry, option='[api] metrics_listen')
        LOG.info('Metrics at %s', server.url)
        return server


def render(registry):
    """``registry`` in the Prometheus text format (0.0.4)."""
    return exposition.generate_latest(registry)


def serve_agent(agent, address):
    """Serve ``agent``'s metrics (discovery, the process) on ``address``; an agent
    alone has no database and no Placement client, so none of those families."""
    registry = prometheus_client.CollectorRegistry()
    registry.register(AgentCollector([agent]))
    prometheus_client.ProcessCollector(registry=registry)
    server = MetricsServer(address, registry)
    LOG.info('Agent %s metrics at %s', agent.host, server.url)
    return server

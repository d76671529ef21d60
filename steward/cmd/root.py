"""The composition root of one command's process: what it is built from.

Each command (``steward serve``, ``api`` and each of its gunicorn workers,
``conductor``, ``agent``, ``db``, ``status``) builds one ``Root`` once its
configuration is parsed and hands what it holds down through constructors (the
ConductorManager through its ``conductor_deps()``, the AgentManager, the API
through its ``api_app()``, with the ARQ operations of ``api_arqs()`` or of the
conductor of the process): no module of steward keeps an engine, a transport, a
policy enforcer, a metrics registry or a client of its own, and none outside
steward/cmd builds a Database, a Transport, a PlacementClient, the conductor's
Deps, the Metrics or the API's policy Enforcer
(tests/unit/structure/test_conductor_wiring.py).
oslo.config's ``CONF`` stays the one project-wide configuration object, as in
every OpenStack service.
"""
import logging

from steward.conf import CONF

LOG = logging.getLogger(__name__)


class Root:
    """The database (``database``; None for ``database=False``: an agent has
    none; a Database already built is taken as it is: a test's), and on demand
    the metrics (``metrics``: ``metrics=True``, or ``'multiprocess'`` for the
    parent of ``steward api`` workers), the API's policy enforcer (``policy``)
    and the message transport (``transport``). ``close()`` releases them, last
    thing in a command."""

    def __init__(self, database=True, metrics=False, policy=False, transport=False):
        from steward import process
        self.lifecycle = process.Lifecycle()   # how the command's service ends
        self.database = None
        if database is True:
            from steward.db import session
            self.database = session.Database()
        elif database:
            self.database = database
        self.metrics = None
        if metrics:
            from steward import metrics as steward_metrics
            self.metrics = steward_metrics.Metrics(
                self.database, multiprocess=metrics == 'multiprocess')
        self.transport = None
        if transport:
            from steward.common import rpc
            self.transport = rpc.Transport()
        # Where this process's Placement client goes when it is not what
        # [placement] says: steward serve's lane in its embedded Placement.
        self.placement_endpoint = None
        self.policy = None
        if policy:
            from steward.api import policy as api_policy
            self.policy = api_policy.Enforcer()
            # A reload (SIGHUP) re-reads the policy file(s) too: steward serve and
            # steward api in one process; api workers are replaced by gunicorn's
            # HUP and each builds its enforcer anew.
            self.lifecycle.on_reload(lambda _changed: self.policy.reload())

    def placement_client(self):
        """The Placement client of a conductor: [placement] names the service, or
        the embedded one of this host (steward/placement/handle.py), through the
        lane steward serve set in ``placement_endpoint`` when there is one."""
        from steward.placement import client
        from steward.placement import handle
        endpoint = None
        if handle.is_embedded(CONF):
            endpoint = self.placement_endpoint or handle.embedded_url(CONF)
        return client.PlacementClient.from_conf(CONF, endpoint=endpoint)

    def conductor_deps(self, agent_version_cap=None):
        """What a conductor's operations work with (steward/conductor/deps.py):
        this root's database, metrics and transport (build the Root with
        ``metrics`` and ``transport``), a Placement client, Nova's server lookup
        and event notifier (off when [nova] names no endpoint), and the agent
        API, pinned to ``agent_version_cap`` when given."""
        from steward.agent import rpcapi as agent_rpcapi
        from steward.arqs import nova_events
        from steward.conductor import deps
        from steward.conductor import nova_servers
        return deps.Deps(
            database=self.database, metrics=self.metrics,
            placement_client=self.placement_client(),
            nova=nova_servers.ServerLookup(), notifier=nova_events.NovaNotifier(),
            agent_api=agent_rpcapi.AgentAPI(self.transport,
                                            version_cap=agent_version_cap))

    def api_arq_service(self, conductor_api, announce=True):
        """The ARQ operations an API process runs itself (steward/arqs/service.py),
        or None: they go to the conductors over RPC. Run here when ``[placement]``
        names the deployment's Placement (a single-accelerator device is reserved
        there at bind and release) and ``[upgrade_levels] conductor`` lets 1.2
        through (the conductors take released devices' cleanups from an API at
        1.2: ``conductor_api``, a ConductorAPI, casts them). Its Nova events go
        where ``[nova]`` says. ``announce``: log which it is (once per process
        group)."""
        from steward.arqs import nova_events
        from steward.arqs import service as arq_service
        from steward.conductor import deps
        from steward.conductor import rpcapi
        from steward.placement import handle
        why_not = None
        if handle.is_embedded(CONF):
            why_not = ('[placement] names no Placement service (auth_type or '
                       'endpoint_override)')
        elif not conductor_api.can_send_version(rpcapi.LOCAL_ARQS_VERSION):
            why_not = (f'[upgrade_levels] conductor caps the conductors below '
                       f'{rpcapi.LOCAL_ARQS_VERSION}')
        if why_not is not None:
            if announce:
                LOG.warning('Accelerator requests are created, bound and deleted by '
                            'the conductors over RPC, not by this API: %s '
                            '(doc/multihost.md, "API hosts")', why_not)
            return None
        notifier = nova_events.NovaNotifier(announce=False)
        if announce:
            LOG.info('Accelerator requests are created, bound and deleted by this API '
                     'process itself; Nova events %s', 'on' if notifier.enabled else
                     'off ([nova] names no endpoint on this API host)')
        return arq_service.ARQService(
            deps.Deps(database=self.database, metrics=self.metrics,
                      placement_client=self.placement_client(), nova=None,
                      notifier=notifier, agent_api=None),
            dispatch_cleanup=conductor_api.device_release_for_cleaning,
            actor=f'api {CONF.host}')

    def api_arqs(self, conductor_api, announce=True):
        """How a ``steward api`` process runs the ARQ operations
        (steward/arqs/api.py): ``LocalArqAPI`` over an ARQService of its own
        (``api_arq_service``) when it can, else ``ArqRPCAPI``: sent to the
        conductors through ``conductor_api`` (a ConductorAPI)."""
        from steward.arqs import api as arq_api
        service = self.api_arq_service(conductor_api, announce=announce)
        if service is None:
            return arq_api.ArqRPCAPI(conductor_api)
        return arq_api.LocalArqAPI(service)

    def api_app(self, conductor_api, arqs_api, transport_url=None, processes=1):
        """The API application (steward/api/app.py) on this root's database,
        metrics and policy enforcer (build the Root with ``metrics`` and
        ``policy``): ``conductor_api`` is how it reaches the conductors (a
        ConductorAPI over RPC, or the LocalConductorAPI of a process that holds
        the ConductorManager), ``arqs_api`` how it runs the ARQ operations (a
        steward/arqs/api.py ArqAPI: ``api_arqs()``, or steward serve's
        LocalArqAPI over its conductor's ARQService), ``transport_url`` the
        broker its /healthcheck checks (None: none), ``processes`` how many API
        processes of this host serve it (their handler threads share its
        cores)."""
        from steward.api import app
        if self.metrics is None or self.policy is None:
            raise TypeError('the API needs a Root built with metrics and policy')
        return app.create_app(conductor_api, arqs_api, self.database, self.metrics,
                              self.policy, transport_url=transport_url,
                              processes=processes)

    def sync_database(self, service, wait=True):
        """At the start of ``service`` (serve, conductor, api): wait for the
        database ([database] max_retries, retry_interval), migrate the schema
        when [database] sync_on_startup says so (unset: only ``serve``), then
        compare it with this release's (doc/contributor/schema-changes.md):

        * newer (a later release's ``db sync`` ran): logged, and served as it
          is; its migrations only added;
        * older, or no schema: SchemaTooOld, which stops the service with the
          advice to run ``steward-manage db sync`` (exit status 3, which the
          systemd units do not restart: the operator's step comes first).

        ``wait=False`` (the API, which starts with its database down and answers
        503 until it is back): one try; a database that cannot be reached is
        logged and not checked (None).
        """
        from oslo_db import exception as db_exc
        import sqlalchemy as sa

        from steward.common import exception
        from steward.db import migration
        if wait:
            self.database.wait_reachable()
        else:
            try:
                migration.schema_state(self.database)
            except (sa.exc.OperationalError, db_exc.DBConnectionError) as err:
                LOG.warning('steward %s: the database schema not checked at start, '
                            'the database is unreachable: %s', service,
                            str(err).splitlines()[0])
                return None
        migrate = CONF.database.sync_on_startup
        if migrate is None:
            migrate = service == 'serve'
        if migrate:
            found = migration.upgrade(self.database)
            if found.relation == 'older':
                LOG.info('steward %s: migrated the database schema (it was %s)',
                         service, found.describe())
        state = migration.schema_state(self.database)
        if state.relation == 'older':
            raise exception.SchemaTooOld(service=service, state=state.describe())
        if state.relation == 'newer':
            LOG.warning('steward %s: the database schema is %s', service,
                        state.describe())
        return state

    def serve_metrics(self, address=None):
        """The [api] metrics_listen server of this process (None: not configured)."""
        address = CONF.api.metrics_listen if address is None else address
        if self.metrics is None or not address.strip():
            return None
        return self.metrics.serve(address)

    def close(self):
        """Last step of a service's shutdown: close the broker connections and the
        database pool so the other side sees a clean close, not a dead peer."""
        steps = []
        if self.transport is not None:
            steps.append(self.transport.cleanup)
        if self.database is not None:
            steps.append(self.database.dispose)
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - shutdown goes on
                LOG.exception('Shutdown step %s failed', step.__qualname__)

"""The ``steward`` command."""
import argparse
import logging
import sys

from oslo_config import cfg

from steward import process
from steward.cmd import root as cmd_root
from steward.common import rpc
from steward.cmd import checks
from steward.placement import handle as placement_handle
from steward.common import exception
from steward.conf import CONF

LOG = logging.getLogger(__name__)
# A service's exit status when the database lacks this release's migrations.
EXIT_SCHEMA_TOO_OLD = 3

USAGE = """steward COMMAND [--config-file FILE ...]
steward --version

Services:
  serve                      API + conductor + agent in one process, with an embedded
                             Placement unless [placement] points elsewhere
  api | conductor | agent    one service each (multi-host deployments)

Administration:
  db sync                    apply schema migrations
  db online-data-migrations  backfill data (device_state, ...)
  db version                 the schema revision of the database
  db import-cyborg           take over an upstream Cyborg's database
                             (doc/switching-from-cyborg.md)
  status upgrade check       is this deployment ready for an upgrade?

The same as separate commands, as OpenStack services ship them (doc/cli.md):
steward-api, steward-conductor, steward-agent, steward-manage db ..., steward-status.

Compute side (reference flow, what Nova does; `steward compute -h`):
  compute boot|delete|list   boot / delete instances with accelerators on this host

Client commands (devices, deployables, device profiles, accelerator requests,
cleanups) are `openstack accelerator ...` (python-openstackclient with Steward's
plugin): see doc/cli.md.
"""


def cmd_serve(argv):
    process.prepare(argv)
    checks.check_exposure(_serve_listeners())
    if CONF.api.workers > 1:
        LOG.warning('[api] workers = %d is for steward api; steward serve is one '
                    'process (doc/install.md)', CONF.api.workers)
    from steward.agent import privileges
    privileges.start(CONF, service='serve')     # before any thread: forks daemons
    root = cmd_root.Root(metrics=True, policy=True, transport=True)
    root.lifecycle.catch_reload()
    # A bad [api] metrics_listen stops serve before anything else starts.
    exporter = root.serve_metrics()
    # Placement takes as long to start as the imports and migrations below: start
    # it now (as the user serve runs as) and let the two run side by side.
    placement_proc = steward_socket = None
    if placement_handle.is_embedded():
        # serve's own Placement client has a lane of its own in the child, the
        # same socket for every restarted child (steward/placement/handle.py).
        steward_socket = placement_handle.steward_socket_path()
        try:
            placement_proc = placement_handle.start_embedded(
                wait=False, steward_socket=steward_socket)
        except BaseException:
            placement_handle.remove_steward_socket(steward_socket)
            raise
        root.placement_endpoint = placement_proc.steward_url
    from steward.agent import manager as agent_manager
    from steward.api import app as api_app  # noqa: F401 - imported now, see above
    from steward.arqs import api as arq_api
    from steward.conductor import local_api
    from steward.conductor import manager as conductor_manager
    from steward.conductor import rpcapi

    # No [nova] on one host: events are off. `steward compute boot`, like Nova, finds
    # its ARQs already resolved and waits for no event.
    servers = []
    agent = conductor = None
    try:
        root.sync_database('serve')
        if placement_proc is not None:
            placement_proc.wait_ready()
            placement_proc = _supervised(placement_proc, root, steward_socket)
        conductor = conductor_manager.ConductorManager(root.conductor_deps())
        conductor.init_host()
        root.lifecycle.on_reload(conductor.reloaded)
        servers.append(root.transport.start_server(CONF.rpc_topic_conductor, CONF.host,
                                                   [conductor]))
        agent = agent_manager.AgentManager(CONF,
                                           rpcapi.ConductorAPI(transport=root.transport),
                                           on_fatal=lambda _err: root.lifecycle.stop(1))
        root.metrics.watch_agent(agent)     # discovery metrics on the API's /metrics
        root.lifecycle.on_reload(agent.reloaded)
        servers.append(root.transport.start_server(CONF.rpc_topic_agent, agent.host,
                                                   [agent]))
        agent.init_host()
        agent.start()
        conductor.start()
        # The API calls the conductor of this process directly, and runs the ARQ
        # operations through that conductor's ARQService.
        app = root.api_app(local_api.LocalConductorAPI(conductor),
                           arq_api.LocalArqAPI(conductor.arqs))
        process.settle_heap()
        root.lifecycle.run_http(app, CONF.api.host_ip, CONF.api.port)
    finally:
        if agent is not None:
            agent.stop()
        for srv in servers:
            rpc.stop_server(srv)
        if conductor is not None:
            conductor.stop()
        if placement_proc is not None:
            placement_proc.stop()
        if steward_socket is not None:
            placement_handle.remove_steward_socket(steward_socket)
        if exporter is not None:
            exporter.stop()
        root.close()
    return root.lifecycle.status


def _supervised(child, root, steward_socket):
    """The embedded Placement, restarted when it dies; serve exits with status 1
    when it cannot be (steward/placement/supervise.py)."""
    from steward.placement import supervise

    def restarted():
        root.metrics.healed('placement_restarted')

    return supervise.PlacementSupervisor(
        child, lambda: placement_handle.start_embedded(wait=True,
                                                       steward_socket=steward_socket),
        CONF.placement.embedded_restart_attempts, on_restart=restarted,
        on_fatal=lambda: root.lifecycle.stop(1)).start()


def _serve_listeners():
    listeners = [('the API', CONF.api.host_ip)]
    if placement_handle.is_embedded():
        listeners.append(('the embedded Placement', CONF.placement.embedded_host))
    return listeners


def cmd_api(argv):
    from steward.cmd import api_factory
    process.prepare(argv)
    checks.check_service_config('api')
    checks.check_exposure([('the API', CONF.api.host_ip)])
    workers = CONF.api.workers
    if workers == 1:
        root = cmd_root.Root(metrics=True, policy=True, transport=True)
        root.sync_database('api', wait=False)
        root.lifecycle.catch_reload()
        app = api_factory.build(root)
        exporter = root.serve_metrics()
        try:
            root.lifecycle.run_http(app, CONF.api.host_ip, CONF.api.port)
        finally:
            if exporter is not None:
                exporter.stop()
            root.close()
        return root.lifecycle.status
    # Several processes: gunicorn's workers (steward/supervisor.py), each building
    # its app after the fork; their bind observations meet in prometheus_client's
    # multiprocess files, which this process serves.
    import os
    import shutil
    import tempfile
    metrics_dir = tempfile.mkdtemp(prefix='steward-api-metrics-')
    os.environ['PROMETHEUS_MULTIPROC_DIR'] = metrics_dir    # before prometheus_client
    from steward import metrics
    from steward import supervisor
    # This process serves the workers' families summed and reads the database
    # families; each worker builds a Root of its own after the fork.
    root = cmd_root.Root(metrics='multiprocess')
    root.sync_database('api', wait=False)      # once, before any worker forks
    root.lifecycle.catch_reload()       # until gunicorn's arbiter takes SIGHUP over
    exporter = root.serve_metrics()
    LOG.info('Steward API listening on http://%s:%s/v2 (%d worker processes)',
             CONF.api.host_ip, CONF.api.port, workers)
    try:
        supervisor.Supervisor(
            api_factory.build, CONF.api.host_ip, CONF.api.port, workers,
            supervisor.API_WORKER, keepalive=process.HTTP_KEEP_ALIVE,
            graceful_timeout=10, name='steward-api', on_fork=root.database.after_fork,
            on_child_exit=metrics.process_dead, share_connections=True,
            # gunicorn's HUP: the configuration re-read here, before it forks the
            # new workers (which read the policy file as they build their app).
            on_reload=root.lifecycle.reload).serve_forever()
    finally:
        if exporter is not None:
            exporter.stop()
        root.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def cmd_conductor(argv):
    from steward.conductor import manager as conductor_manager
    process.prepare(argv)
    checks.check_service_config('conductor')
    root = cmd_root.Root(metrics=True, transport=True)
    root.lifecycle.catch_reload()
    root.sync_database('conductor')
    conductor = conductor_manager.ConductorManager(
        root.conductor_deps(agent_version_cap=checks.rpc_version_cap('agent')))
    conductor.init_host()
    root.lifecycle.on_reload(conductor.reloaded)
    srv = root.transport.start_server(CONF.rpc_topic_conductor, CONF.host, [conductor])
    conductor.start()
    LOG.info('Conductor %s serving topic %s', CONF.host, CONF.rpc_topic_conductor)
    process.settle_heap()
    try:
        root.lifecycle.wait_for_shutdown()
    finally:
        rpc.stop_server(srv)     # in-flight calls finish first
        conductor.stop()
        root.close()
    return 0


def cmd_agent(argv):
    from steward import metrics
    from steward.agent import manager as agent_manager
    from steward.conductor import rpcapi
    process.prepare(argv)
    checks.check_service_config('agent')
    from steward.agent import privileges
    privileges.start(CONF)      # before any thread: forks daemons, drops privileges
    root = cmd_root.Root(database=False, transport=True)
    root.lifecycle.catch_reload()
    agent = agent_manager.AgentManager(
        CONF, rpcapi.ConductorAPI(transport=root.transport,
                                  version_cap=checks.rpc_version_cap('conductor')),
        on_fatal=lambda _err: root.lifecycle.stop(1))
    root.lifecycle.on_reload(agent.reloaded)
    # Before the RPC server: a bad [agent] metrics_listen stops the agent at once.
    exporter = metrics.serve_agent(agent, CONF.agent.metrics_listen) \
        if CONF.agent.metrics_listen.strip() else None
    srv = root.transport.start_server(CONF.rpc_topic_agent, agent.host, [agent])
    LOG.info('Agent %s serving topic %s (server %s)', agent.host, CONF.rpc_topic_agent,
             agent.host)
    try:
        agent.init_host()
        agent.start()
        process.settle_heap()
        root.lifecycle.wait_for_shutdown()
    finally:
        agent.stop()
        rpc.stop_server(srv)
        if exporter is not None:
            exporter.stop()
        root.close()
    return root.lifecycle.status


def cmd_db(argv):
    if argv[:1] == ['import-cyborg']:
        from steward.cmd import import_cyborg
        return import_cyborg.main(argv[1:])
    parser = argparse.ArgumentParser(prog='steward db')
    # online_data_migrations: the spelling of nova-manage and every <service>-manage.
    parser.add_argument('action', choices=['sync', 'online-data-migrations',
                                           'online_data_migrations', 'version'])
    args, rest = parser.parse_known_args(argv)
    process.prepare(rest)
    from steward.db import data_migrations, migration
    database = cmd_root.Root().database
    try:
        if args.action == 'sync':
            found = migration.upgrade(database)
            if found.relation == 'newer':     # an older release's db sync: harmless
                print(f'Nothing to do: the database schema is {found.describe()}')
            else:
                print(f'Database at revision {migration.current_revision(database)}')
        elif args.action == 'version':
            print(migration.current_revision(database))
        else:
            migration.upgrade(database)
            for name, count in data_migrations.run_all(database).items():
                print(f'{name}: {count} row(s) migrated')
            left = sum(data_migrations.pending(database).values())
            print('All online data migrations complete.' if not left
                  else f'{left} row(s) still need migrating')
    finally:
        database.dispose()
    return 0


def cmd_status(argv):
    from steward.cmd import status
    return status.main(argv)


def _delegate(module):
    def run(argv):
        from oslo_utils import importutils
        return importutils.import_module(f'steward.cmd.{module}').main(argv)
    return run


COMMANDS = {'serve': cmd_serve, 'api': cmd_api, 'conductor': cmd_conductor,
            'agent': cmd_agent, 'db': cmd_db, 'status': cmd_status,
            # The compute-side reference flow (talks to the API and Placement).
            'compute': _delegate('compute')}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help', 'help'):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == '--version':
        from steward import version
        print(version.version_string())
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        return command(argv[1:])
    except exception.InvalidConfiguration as err:
        process.fail(str(err))
    except exception.SchemaTooOld as err:
        # Not 1: the systemd units' RestartPreventExitStatus=3 keeps a service
        # that waits for the operator's db sync from restarting every 5 s.
        process.fail(str(err), EXIT_SCHEMA_TOO_OLD)
    except cfg.Error as err:    # a file that is missing or unreadable, a bad value
        process.fail(f'configuration: {err}', 2)
    except KeyboardInterrupt:
        return 130


if __name__ == '__main__':
    sys.exit(main())

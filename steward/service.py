"""Wiring shared by the steward commands: configuration, database, Placement,
RPC servers and the HTTP server."""
import logging as pylogging
import os
import sys
import warnings

from oslo_log import log as logging

from steward.conf import CONF

LOG = logging.getLogger(__name__)
_prepared = False


def prepare(argv, default_config_files=None):
    """Parse configuration and set up logging. ``argv`` excludes the command."""
    global _prepared
    warnings.filterwarnings('ignore', message='.*[Ee]ventlet.*')
    if not _prepared:
        logging.register_options(CONF)
        _prepared = True
    CONF(argv, project='steward', default_config_files=default_config_files)
    logging.setup(CONF, 'steward')
    for noisy in ('stevedore', 'oslo.messaging', 'oslo_messaging', 'kombu', 'amqp',
                  'keystoneauth', 'urllib3', 'alembic'):
        pylogging.getLogger(noisy).setLevel(pylogging.WARNING)
    os.makedirs(CONF.state_path, exist_ok=True)


def sync_database():
    from steward.db import migration
    if CONF.database.sync_on_startup:
        migration.upgrade()


def placement_is_embedded():
    return CONF.placement.embedded and not (CONF.placement.auth_type
                                            or CONF.placement.endpoint_override)


def embedded_placement_url():
    return f'http://{CONF.placement.embedded_host}:{CONF.placement.embedded_port}'


def placement_client(endpoint=None):
    from steward.placement import client
    if endpoint is None and placement_is_embedded():
        endpoint = embedded_placement_url()
    return client.PlacementClient.from_conf(CONF, endpoint=endpoint)


def start_embedded_placement():
    from steward.placement import embedded
    log_file = os.path.join(CONF.state_path, 'placement.log')
    proc = embedded.start_subprocess(CONF.placement.embedded_connection,
                                     CONF.placement.embedded_host,
                                     CONF.placement.embedded_port, log_file=log_file)
    LOG.info('Embedded Placement (pid %s) at %s, log %s', proc.pid, proc.url, log_file)
    return proc


def start_rpc_server(topic, server, endpoints):
    from steward.common import rpc
    srv = rpc.get_server(topic, server, endpoints)
    srv.start()
    return srv


def stop_rpc_server(srv):
    try:
        srv.stop()
        srv.wait()
    except Exception:   # shutdown must go on whatever one server does
        LOG.exception('Stopping an RPC server failed')


def run_http(app, host, port):
    import uvicorn
    config = uvicorn.Config(app, host=host, port=port, log_level='warning',
                            access_log=False, lifespan='off')
    server = uvicorn.Server(config)
    LOG.info('Steward API listening on http://%s:%s/v2', host, port)
    server.run()


def fail(message, code=1):
    print(f'steward: {message}', file=sys.stderr)
    sys.exit(code)

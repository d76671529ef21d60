"""The embedded Placement's WSGI app: the real openstack-placement on a private
configuration (steward/placement/settings.py: the operator's file over Steward's
defaults; noauth2, schema migrated on load), with Steward's patches
(steward/placement/patches.py) applied where their version guard allows.

Placement's database layer is global and configured once per process (its
``db_api.configure`` is ``@run_once``), so a process serves at most one Placement
database; ``build_app`` enforces that instead of silently using the first one.
"""
import os
import threading

from steward.common import exception
from steward.common import netutils
from steward.db import sqlite
from steward.placement import patches

_build_lock = threading.Lock()
_built = {}   # 'url' once placement's DB layer is configured; 'app' once loaded


def built_url():
    """The database URL this process's Placement runs on, or None."""
    return _built.get('url')


def built_engine():
    return _built.get('engine')


def build_app(connection_url, config_file=None):
    """The Placement WSGI app on ``connection_url``, with Placement's options from
    ``config_file`` (settings.py); one database and one configuration per process.

    A repeated call with the same URL and file returns the same app; another
    raises InvalidConfiguration. Placement's oslo.log setup is deliberately not
    called: it would reconfigure the host process's logging. Its loggers propagate
    to whatever the host configured.
    """
    with _build_lock:
        if _built.get('url') not in (None, connection_url):
            raise exception.InvalidConfiguration(
                reason='this process already runs Placement on %s; Placement '
                       'configures its database once per process, so %s cannot be '
                       'served here' % (netutils.redacted_url(_built['url']),
                                        netutils.redacted_url(connection_url)))
        if 'url' in _built and _built.get('config_file') != config_file:
            raise exception.InvalidConfiguration(
                reason='this process already runs Placement configured from %s; '
                       'Placement is configured once per process, so %s cannot be '
                       'used here' % (_built.get('config_file') or 'no file',
                                      config_file or 'no file'))
        if _built.get('app') is not None:
            return _built['app']
        # Each step is recorded once done: if a later one fails (a bad URL, a locked
        # database) the DB layer stays configured for this URL and a retry with it
        # resumes where it stopped.
        if 'url' not in _built:
            _configure_db(connection_url, config_file)
        if 'engine' not in _built:
            _built['engine'] = _start_engine()
        import placement.deploy
        patches.apply(patches.check_schemas_once)
        patches.apply(patches.share_table_aliases)
        patches.apply(patches.hash_candidates_by_mappings)
        patches.apply(patches.watch_candidate_generation)
        # Migrates the schema and syncs standard traits and resource classes.
        _built['app'] = placement.deploy.loadapp(_built['conf'])
        patches.apply(patches.policy_from_defaults_only, _built['conf'])
        return _built['app']


def _configure_db(connection_url, config_file):
    from oslo_config import cfg
    import placement.conf
    import placement.db_api

    from steward.placement import settings

    if placement.db_api.configure.called:
        raise exception.InvalidConfiguration(
            reason="Placement's database layer was already configured in this "
                   'process by other code (an upstream PlacementFixture?)')
    path = sqlite.sqlite_file(connection_url)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    conf = cfg.ConfigOpts()
    if not patches.apply(patches.register_quietly, conf):
        placement.conf.register_opts(conf)
    settings.configure(conf, connection_url, config_file)
    placement.db_api.configure(conf)
    _built['url'], _built['conf'] = connection_url, conf
    _built['config_file'] = config_file


def _start_engine():
    import placement.db_api

    factory = placement.db_api.placement_context_manager._factory
    patches.apply(patches.start_engine_apart, factory)
    engine = placement.db_api.get_placement_engine()
    if engine.dialect.name == 'sqlite':
        patches.apply(patches.serialize_sqlite_writers, engine)
        patches.apply(patches.pool_sqlite_connections, engine)
        patches.apply(patches.readers_apart, factory, engine)
    return engine

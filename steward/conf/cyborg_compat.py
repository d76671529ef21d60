"""Upstream Cyborg 17.0.0's configuration options that Steward does not read.

A ``cyborg.conf`` copied over as Steward's configuration works: every Cyborg
option with a Steward equivalent is accepted under Cyborg's own group and name
(the ``deprecated_opts`` of Steward's options, e.g. ``[api] api_workers`` for
``[api] workers``), and the options below are the rest. Nothing reads them;
``steward-status upgrade check`` names those set in the loaded configuration
files (a WARNING), so an operator sees what no longer has an effect.

tests/functional/test_cyborg_config.py compares this list with the sample
configuration generated from the real openstack-cyborg 17.0.0 package: every
Cyborg option is either accepted by Steward or listed here, and nothing listed
here is accepted.
"""

# Whole groups: what Steward has no counterpart of at all.
IGNORED_GROUPS = {
    'glance': 'Steward does not program FPGA bitstreams from Glance images.',
    'service_user': 'Steward sends no service token along with a user token '
                    '(its calls to Placement and Nova use their own credentials).',
    'ssl': 'steward api serves plain HTTP; terminate TLS in front of it.',
    'nic_devices': 'Steward has no NIC driver (see doc/drivers/).',
    # NOTE(steward): oslo.middleware's CORS filter is not in Steward's pipeline.
}

# (group, option): why it has no effect.
IGNORED_OPTIONS = {
    ('DEFAULT', 'fatal_exception_format_errors'): 'Steward\'s errors have fixed '
        'messages and codes (steward/common/exception.py).',
    ('DEFAULT', 'thread_pool_size'): 'the API\'s handler pool follows [database] '
        'max_pool_size.',
    ('DEFAULT', 'pybasedir'): 'Steward locates its own files.',
    ('DEFAULT', 'bindir'): 'Steward locates its own files.',
    ('DEFAULT', 'run_external_periodic_tasks'): 'oslo.service\'s; every conductor '
        'runs the periodic tasks ([conductor]).',
    ('DEFAULT', 'backdoor_port'): 'oslo.service\'s eventlet backdoor; Steward does '
        'not use eventlet.',
    ('DEFAULT', 'backdoor_socket'): 'oslo.service\'s eventlet backdoor; Steward '
        'does not use eventlet.',
    ('DEFAULT', 'graceful_shutdown_timeout'): 'oslo.service\'s; Steward\'s '
        'services stop in-flight work themselves.',
    ('DEFAULT', 'log_options'): 'oslo.service\'s option dump at start.',
    ('api', 'api_paste_config'): 'Steward\'s API has no paste pipeline.',
    ('api', 'enable_ssl_api'): 'steward api serves plain HTTP; terminate TLS in '
        'front of it.',
    ('agent', 'resource_provider_startup_retries'): 'the agent reports again at '
        'every discovery cycle until its compute-node provider exists.',
    ('gpu_devices', 'filter_sriov_vfs'): 'Steward never reports a GPU\'s SR-IOV '
        'VFs unless [nvidia_gpu] include_vfs is set.',
    # oslo.db's options Steward's database layer does not take: no replica or
    # asyncio engines, one backend, and its own reconnect and SQLite handling.
    **{('database', name): 'oslo.db\'s option; Steward\'s [database] does not '
       'read it (doc/configuration.md lists the ones it reads).'
       for name in ('asyncio_connection', 'asyncio_slave_connection', 'backend',
                    'mysql_engine', 'slave_connection', 'sqlite_synchronous',
                    'synchronous_reader', 'use_db_reconnect')},
}


def ignored(group, name):
    """Why ``[group] name`` of a Cyborg configuration has no effect in Steward,
    or None when Steward reads it (or it was never Cyborg's)."""
    if group in IGNORED_GROUPS:
        return IGNORED_GROUPS[group]
    return IGNORED_OPTIONS.get((group, name))

"""The API as an application for a hosting server (gunicorn with uvicorn's
worker class, uvicorn, any ASGI server), as Placement's placement/wsgi:
``steward.wsgi.api:application`` is built when the server imports it, in each
worker process, from configuration files the environment names:

``STEWARD_CONFIG_FILES``
    The configuration files, separated by commas (later ones override earlier
    ones, as repeated ``--config-file``). When set, ``OS_STEWARD_CONFIG_DIR`` is
    not read.
``OS_STEWARD_CONFIG_DIR``
    The directory holding ``steward.conf`` (default ``/etc/steward``), and
    ``steward.conf.d/*.conf`` when that directory exists.

Nothing else is read from the command line (the server's own arguments are not
Steward's). Logging is set up from the files (``[DEFAULT] log_file``,
``debug``, ...) with Steward's default levels.
"""
import os


CONFIG_FILE = 'steward.conf'
ENV_CONFIG_FILES = 'STEWARD_CONFIG_FILES'
ENV_CONFIG_DIR = 'OS_STEWARD_CONFIG_DIR'
DEFAULT_CONFIG_DIR = '/etc/steward'

def config_sources(env=None):
    """(files, dirs) for oslo.config, from the environment."""
    env = os.environ if env is None else env
    named = env.get(ENV_CONFIG_FILES, '').strip()
    if named:
        return [p.strip() for p in named.split(',') if p.strip()], []
    dirname = env.get(ENV_CONFIG_DIR, '').strip() or DEFAULT_CONFIG_DIR
    confd = os.path.join(dirname, CONFIG_FILE + '.d')
    return [os.path.join(dirname, CONFIG_FILE)], [confd] if os.path.isdir(confd) else []


def init_application(env=None):
    """Configure this process and build the API application: its own
    composition root (database, metrics, policy, transport) and the app
    ``steward api`` serves (steward/cmd/api_factory.py)."""
    from steward import process
    from steward.cmd import api_factory
    from steward.cmd import checks
    from steward.cmd import root as cmd_root
    files, dirs = config_sources(env)
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        # The server would otherwise serve with every default (an SQLite file
        # in the home directory, no authentication) without a word.
        raise RuntimeError(f'steward: configuration file(s) not found: '
                           f'{", ".join(missing)} (set {ENV_CONFIG_FILES} or '
                           f'{ENV_CONFIG_DIR})')
    # Steward's default log levels (libraries quieted as in `steward api`) are
    # set by prepare(), before the files are parsed.
    process.prepare([], default_config_files=files, default_config_dirs=dirs)
    checks.check_service_config('api')
    root = cmd_root.Root(metrics=True, policy=True, transport=True)
    # A schema older than this release: SchemaTooOld, the hosting server's worker
    # does not boot (its message names "steward-manage db sync").
    root.sync_database('api', wait=False)
    return api_factory.build(root)

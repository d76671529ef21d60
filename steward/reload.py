"""What a reload (SIGHUP) does to the configuration of a Steward process, whichever
command it runs: the configuration files are read again, the options marked
``mutable`` take their new values (oslo.config logs each one, and warns about a
changed option that is not mutable), and the log levels follow ``debug`` and
``default_log_levels``. ``steward.process.Lifecycle.reload`` calls it, on the main
thread (or the gunicorn arbiter's), and then the process's own parts.
"""
import logging as pylogging

from oslo_log import _options as log_options
from oslo_log import log as logging

from steward.conf import CONF

LOG = logging.getLogger(__name__)

# Loggers Steward keeps at WARNING unless the operator's default_log_levels says
# otherwise: at INFO they log every connection and entry point they load.
QUIET_LOGGERS = ('stevedore', 'oslo.messaging', 'oslo_messaging', 'kombu', 'amqp',
                 'keystoneauth', 'urllib3', 'alembic')


def prepare_log_options():
    """Before the configuration is parsed: Steward's default log levels, and
    ``default_log_levels`` mutable. oslo.log marks ``debug`` mutable and its own
    mutate hook applies it, but applies ``default_log_levels`` only at setup()."""
    for opt in log_options.log_opts:
        if opt.name == 'default_log_levels':
            # NOTE(steward): the registered Opt is this object; flipping the flag
            # before CONF is parsed is what mutable=True at its definition would do.
            opt.mutable = True
    levels = dict(pair.partition('=')[::2] for pair in logging.get_default_log_levels())
    levels.update((name, 'WARN') for name in QUIET_LOGGERS)
    logging.set_defaults(default_log_levels=[f'{k}={v}' for k, v in levels.items()])


def apply_log_levels():
    """The root level from ``debug``, each logger's from ``default_log_levels``
    (what oslo.log's setup() does; a log_config_append file rules otherwise, and
    oslo.log's hook reloads it)."""
    if CONF.log_config_append:
        return
    pylogging.getLogger().setLevel(pylogging.DEBUG if CONF.debug else pylogging.INFO)
    for pair in CONF.default_log_levels:
        name, _, level = pair.partition('=')
        pylogging.getLogger(name).setLevel(int(level) if level.isdigit() else level)


def reread():
    """Read the configuration files again. Returns {(group or None, option): (old,
    new)} of the mutable options whose value changed, or None (and one ERROR line)
    when a file is missing, does not parse or holds a value its option refuses: the
    configuration in force then stays, all of it."""
    # NOTE(steward): oslo.config compares the raw strings of the files and only
    # converts a value when it is read: a bad value would otherwise be found by the
    # first reader after the reload. On any failure the namespace in force before
    # the call is put back (mutate_config_files replaces it first).
    previous = CONF._mutable_ns
    try:
        changed = CONF.mutate_config_files()
        for group, name in changed:
            getattr(CONF[group] if group else CONF, name.replace('-', '_'))
    except Exception as err:  # noqa: BLE001 - any failure keeps the old configuration
        CONF._mutable_ns = previous
        CONF._ConfigOpts__cache.clear()
        LOG.error('Configuration reload failed; the configuration in force is kept: '
                  '%s', err)
        changed = None
    apply_log_levels()
    return changed

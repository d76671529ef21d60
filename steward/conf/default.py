import os
import socket

from oslo_config import cfg

DEFAULT_TRANSPORT_URL = 'kombu+stewardmem:////'


def _default_state_path():
    base = os.environ.get('XDG_STATE_HOME') or os.path.expanduser('~/.local/state')
    return os.path.join(base, 'steward')


opts = [
    cfg.StrOpt('host', default=socket.getfqdn(), sample_default='<fqdn>',
               help='Name of this host. The agent uses it as its RPC server name and, '
                    'unless [agent] resource_provider_name is set, as the name of the '
                    'compute-node resource provider its devices hang under. Nova names '
                    'that provider after the libvirt FQDN, hence the FQDN default.'),
    cfg.StrOpt('state_path', default=_default_state_path(),
               sample_default='$XDG_STATE_HOME/steward',
               help='Directory for Steward state: the SQLite databases of the '
                    'single-host stack and the embedded Placement.'),
    cfg.StrOpt('sysfs_root', default='/sys',
               help='Root of the sysfs tree every driver reads. Tests and dry runs '
                    'point it at a tree in the kernel layout.'),
    cfg.StrOpt('dev_root', default='/dev',
               help='Root of the device nodes every driver opens.'),
    cfg.StrOpt('rpc_topic_conductor', default='steward-conductor',
               help='RPC topic of the conductor service.'),
    cfg.StrOpt('rpc_topic_agent', default='steward-agent',
               help='RPC topic of the agent service; each agent listens as server=host.'),
    cfg.IntOpt('rpc_response_timeout_bind', default=60, min=1, mutable=True,
               deprecated_name='bind_timeout',
               help='Seconds the API waits for the conductor on a bind call.'),
    cfg.FloatOpt('rpc_unavailable_timeout', default=10.0, min=0.0, mutable=True,
                 help='Seconds the API keeps trying to reach the message broker '
                      'for a call to the conductor (accelerator request create, '
                      'bind, unbind, delete; device status and clean) before it '
                      'answers 503 cyb.service.unavailable. The call is then '
                      'abandoned: it is never sent once the broker is back. '
                      'Turned into a number of reconnection attempts from '
                      '[oslo_messaging_rabbit] kombu_reconnect_delay, '
                      'rabbit_retry_interval, rabbit_retry_backoff and '
                      'rabbit_interval_max; each attempt to an address that '
                      'drops packets (rather than refusing) also waits for the '
                      'TCP connect timeout. 0: one attempt. Agents\' calls are '
                      'not bounded: a report or cleanup result waits for the '
                      'broker and is delivered when it returns.'),
]


def register_opts(conf):
    conf.register_opts(opts)
    # The single-host stack runs every service in one process: an in-memory kombu
    # transport costs ~1.4 ms a call where fake:// polls every 50 ms; ours also
    # sleeps while idle (steward/common/memory_transport.py).
    import oslo_messaging
    oslo_messaging.set_transport_defaults(control_exchange='steward')
    from oslo_messaging import transport as _transport
    conf.register_opts(_transport._transport_opts)
    conf.set_default('transport_url', DEFAULT_TRANSPORT_URL)


def set_lib_defaults():
    """oslo.config.opts.defaults hook (pyproject.toml): oslo-config-generator and
    the generated docs show Steward's transport_url default, not oslo.messaging's
    ``rabbit://``, and Steward's defaults of oslo.middleware's options."""
    from oslo_config import cfg as _cfg
    from oslo_messaging import transport as _transport
    _cfg.set_defaults(_transport._transport_opts, transport_url=DEFAULT_TRANSPORT_URL)
    from steward.conf import middleware
    middleware.set_lib_defaults()


def list_opts():
    return [(None, opts)]

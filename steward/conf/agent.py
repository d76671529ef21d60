from oslo_config import cfg

group = cfg.OptGroup('agent', title='Agent options')

opts = [
    cfg.ListOpt('enabled_drivers', default=['fake'],
                help='Drivers the agent loads (entry points in steward.drivers). '
                     'Upstream names such as fake_driver are accepted.'),
    cfg.IntOpt('discovery_interval', default=60, min=1, mutable=True,
               deprecated_opts=[cfg.DeprecatedOpt('periodic_interval', group='DEFAULT')],
               help='Seconds between two discovery cycles.'),
    cfg.StrOpt('resource_provider_name',
               help='Name of the compute-node resource provider the devices of '
                    'this host hang under. Default: [DEFAULT] host.'),
    cfg.StrOpt('metrics_listen', default='',
               help='HOST:PORT where `steward agent` (running alone) serves its '
                    'Prometheus metrics at /metrics, e.g. 127.0.0.1:9464 or '
                    '[::1]:9464. Empty: no metrics endpoint. Not used by `steward '
                    'serve`, whose [api] metrics_listen serves the agent\'s too.'),
    cfg.StrOpt('run_as_user',
               help='User (name or uid) the agent process switches to once its '
                    'privsep daemons are running, when started as root: the '
                    'privileged work stays in the daemons (doc/privileges.md), the '
                    'agent keeps no capability. Empty: `steward agent` keeps its '
                    'user (and only drops the capabilities it was started with); '
                    '`steward serve` keeps everything.'),
    cfg.StrOpt('run_as_group',
               help='Group (name or gid) with [agent] run_as_user. Empty: the '
                    "user's primary group."),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

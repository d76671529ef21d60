from oslo_config import cfg

group = cfg.OptGroup('agent', title='Agent options')

opts = [
    cfg.ListOpt('enabled_drivers', default=['fake'],
                help='Drivers the agent loads (entry points in steward.drivers). '
                     'Upstream names such as fake_driver are accepted.'),
    cfg.IntOpt('discovery_interval', default=60, min=1,
               help='Seconds between two discovery cycles.'),
    cfg.StrOpt('resource_provider_name',
               help='Name of the compute-node resource provider the devices of '
                    'this host hang under. Default: [DEFAULT] host.'),
    cfg.StrOpt('metrics_listen', default='',
               help='HOST:PORT where `steward agent` (running alone) serves its '
                    'Prometheus metrics at /metrics, e.g. 127.0.0.1:9464 or '
                    '[::1]:9464. Empty: no metrics endpoint. Not used by `steward '
                    'serve`, whose API serves /metrics.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

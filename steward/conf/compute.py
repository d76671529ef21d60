from oslo_config import cfg

group = cfg.OptGroup('compute', title='Compute-side (Nova half) options')

opts = [
    cfg.StrOpt('events_listen', default='127.0.0.1:8774',
               help='host:port where the compute side serves '
                    'POST /v2.1/os-server-external-events.'),
    cfg.IntOpt('arq_binding_timeout', default=300, min=1,
               help='Seconds a boot waits for accelerator-request-bound events.'),
    cfg.BoolOpt('owner_nova_prefilter', default=True,
                help='Require OWNER_NOVA on the root provider for Nova\'s own '
                     'request groups.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

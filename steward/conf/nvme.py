from oslo_config import cfg

group = cfg.OptGroup('nvme', title='Generic NVMe driver with secure cleanup',
                     help='NVMe controllers handed out whole and cleaned between '
                          'tenants (enabled_drivers = nvme).')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='One JSON object per value: vendor_id, product_id, address '
                         '(glob or regex dict) plus clear_action (auto|sanitize|zero) '
                         'and clear_strategy (auto|crypto|block).'),
    cfg.IntOpt('cleanup_timeout', default=900, min=1,
               help='Seconds one cleanup may take before the device goes to error.'),
    cfg.StrOpt('nvme_cli', default='nvme',
               help='The nvme-cli binary (a name on PATH or a path).'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

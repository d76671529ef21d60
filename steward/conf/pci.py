from oslo_config import cfg

group = cfg.OptGroup('pci', title='Generic PCI driver',
                     help='Devices the pci driver hands out (enabled_drivers = pci).')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    deprecated_name='passthrough_whitelist',
                    help='One JSON object per value, Nova device_spec style: '
                         'vendor_id, product_id, address (glob string or dict of '
                         'per-field regexes), devname; plus managed (default true), '
                         'live_migratable (default false; as Nova\'s own tag: the '
                         'device may be live migrated, doc/moves.md), resource_class '
                         'and traits. No entry: no device reported.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

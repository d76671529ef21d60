from oslo_config import cfg

group = cfg.OptGroup('mdev', title='Generic mdev driver',
                     help='Mediated-device types the mdev driver reports '
                          '(enabled_drivers = mdev).')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='One JSON object per value: address (parent device) and '
                         'mdev_type required; max_instances, resource_class and '
                         'traits optional.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

from oslo_config import cfg

group = cfg.OptGroup('mdev', title='Generic mdev driver',
                     help='Mediated-device types the mdev driver reports '
                          '(enabled_drivers = mdev).')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='One JSON object per value, one (parent, type) pair each: '
                         'address (the parent\'s name in /sys/class/mdev_bus: a PCI '
                         'address such as 0000:41:00.0, or a virtual parent such as '
                         'mtty) and mdev_type (e.g. nvidia-319, i915-GVTg_V5_4, '
                         'mtty-2) required; max_instances (cap on the reported '
                         'total), resource_class (default CUSTOM_MDEV_<TYPE>), '
                         'traits (list) and live_migratable (default false; the '
                         'type\'s mdevs may be live migrated, doc/moves.md) '
                         'optional. A trailing comma after the object '
                         'is accepted. Only listed pairs are reported; invalid '
                         'entries are logged at start and skipped.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

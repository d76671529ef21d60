from oslo_config import cfg

group = cfg.OptGroup('compute', title='Compute-side (Nova half) options',
                     help='The compute side (steward.compute, `steward compute ...`) '
                          'does what nova-conductor and nova-compute do for an '
                          'instance with accelerators on this host.')

opts = [
    cfg.StrOpt('events_listen', default='127.0.0.1:8774',
               help='host:port where the compute side serves '
                    'POST /v2.1/os-server-external-events while a boot waits for its '
                    'accelerator-request-bound events not yet resolved (for a [nova] '
                    'endpoint_override pointed here).'),
    cfg.IntOpt('arq_binding_timeout', default=300, min=1,
               help='Seconds a boot waits for accelerator-request-bound events. '
                    'A timeout aborts the boot (everything it claimed is released).'),
    cfg.BoolOpt('owner_nova_prefilter', default=True,
                help='Require OWNER_NOVA on the root provider and in Nova\'s own '
                     'request groups (and forbid OWNER_CYBORG there), so Nova-owned '
                     'and Cyborg-owned devices never satisfy each other\'s groups. '
                     'Nova turns it on when every compute reports the trait.'),
    cfg.StrOpt('domain_type', default='kvm', choices=['kvm', 'qemu'],
               help='libvirt domain type of the generated domain XML.'),
    cfg.StrOpt('mdev_backend', default='auto', choices=['auto', 'libvirt', 'sysfs'],
               help='How mediated devices are created before the domain and removed '
                    'on delete. libvirt: a persistent node device (virsh '
                    'nodedev-define/start on libvirt_uri). sysfs: the kernel\'s '
                    'mdev_supported_types/<type>/create under mdev_sysfs_root. auto: '
                    'libvirt when virsh can connect to libvirt_uri, else sysfs.'),
    cfg.StrOpt('libvirt_uri', default='qemu:///system',
               help='libvirt connection used for mediated devices.'),
    cfg.StrOpt('mdev_sysfs_root', default='$sysfs_root',
               help='sysfs root of the sysfs mdev backend (class/mdev_bus/... below '
                    'it).'),
    cfg.MultiStrOpt('nova_pci_device_spec', default=[],
                    help='Nova\'s own [pci] device_spec entries (same JSON). A device '
                         'an accelerator request hands over that also matches one of '
                         'them gets a warning: Nova and Steward must never both own '
                         'a device (spec 5).'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

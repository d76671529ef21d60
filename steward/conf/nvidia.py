from oslo_config import cfg

group = cfg.OptGroup('nvidia_gpu', title='NVIDIA GPU driver',
                     help='pGPUs and vGPU types of NVIDIA GPUs (enabled_drivers = '
                          'nvidia_gpu).')

opts = [
    cfg.ListOpt('enabled_vgpu_types', default=[],
                deprecated_opts=[cfg.DeprecatedOpt('enabled_vgpu_types',
                                                   group='gpu_devices')],
                help='vGPU types (mdev type names, e.g. nvidia-35) to report. Each '
                     'type is mapped to GPUs by the device_addresses option of its '
                     'own group [vgpu_<type>] (e.g. [vgpu_nvidia-35] device_addresses '
                     '= 0000:84:00.0,0000:85:00.0). With exactly one type listed and '
                     'no device_addresses, every NVIDIA GPU offering it reports it. A '
                     'GPU carries one vGPU type; a GPU with none is reported whole '
                     '(resource class PGPU).'),
    cfg.BoolOpt('include_vfs', default=False,
                help='Also report SR-IOV virtual functions of NVIDIA GPUs. Needed '
                     'where the vGPU types live on the VFs (SR-IOV vGPU, Ampere and '
                     'later): list the VF addresses in device_addresses. Off, VFs are '
                     'ignored. A PF whose VFs are enabled is never reported as a '
                     'PGPU.'),
]


def vgpu_group(type_name):
    return f'vgpu_{type_name}'


def vgpu_opts():
    return [cfg.ListOpt('device_addresses', default=[],
                        help='PCI addresses of the GPUs (or VFs) that report this '
                             'vGPU type.')]


def register_vgpu_groups(conf):
    """Register ``[vgpu_<type>]`` for every enabled type; reading its values works
    on an already parsed configuration. Returns the group names."""
    names = []
    for type_name in conf.nvidia_gpu.enabled_vgpu_types:
        name = vgpu_group(type_name)
        conf.register_opts(vgpu_opts(), group=name)
        names.append(name)
    return names


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

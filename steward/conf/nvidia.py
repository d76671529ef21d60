from oslo_config import cfg

group = cfg.OptGroup('nvidia_gpu', title='NVIDIA GPU driver',
                     help='pGPUs and vGPU types of NVIDIA GPUs (enabled_drivers = '
                          'nvidia_gpu).')

opts = []


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

from oslo_config import cfg

group = cfg.OptGroup('health', title='Device health',
                     help='What the drivers read of each device\'s health and where '
                          'a warning becomes unhealthy (doc/health.md). Read by the '
                          'agents: set them on the compute hosts.')

opts = [
    cfg.IntOpt('read_at_refresh', default=300, min=0,
               help='Conductor: how old (seconds) a device\'s "last read" time may '
                    'grow while its agent reports the same readings before it is '
                    'written again (a write per host at most this often).'),
    cfg.BoolOpt('nvme_critical_warning_unhealthy', default=True,
                help='Any NVMe critical warning bit (spare, temperature, '
                     'reliability, read-only, volatile backup, PMR read-only) makes '
                     'the drive unhealthy; False: only a warning.'),
    cfg.IntOpt('nvme_percentage_used_warning', default=90, min=1, max=255,
               help='NVMe percentage used (SMART byte 5) at or above which the drive '
                    'is in warning.'),
    cfg.IntOpt('nvme_media_errors_unhealthy', default=0, min=0,
               help='Media and data integrity errors at or above which the drive is '
                    'unhealthy (any below it and above 0 is a warning); 0: any '
                    'media error is only a warning.'),
    cfg.BoolOpt('pci_aer_fatal_unhealthy', default=True,
                help='A PCI function (or mdev parent) whose aer_dev_fatal counter '
                     'is above 0 is unhealthy; False: a warning.'),
    cfg.BoolOpt('pci_aer_nonfatal_unhealthy', default=False,
                help='A non-zero aer_dev_nonfatal counter makes the function '
                     'unhealthy; by default it is a warning.'),
    cfg.IntOpt('pci_correctable_warning', default=1, min=1,
               help='Correctable AER errors (aer_dev_correctable TOTAL_ERR_COR) '
                    'counted since the agent first read the function, at or above '
                    'which it is in warning.'),
    cfg.StrOpt('fake_health_file', default='',
               help='The fake driver\'s health, for tests and demonstrations: a '
                    'file holding {"state": "ok" | "warning" | "unhealthy", '
                    '"detail": "..."}, read at every discovery; empty or absent: '
                    'ok.'),
    cfg.StrOpt('gpu_kernel_log', default='',
               help='A file holding the kernel log (e.g. /var/log/kern.log) in '
                    'which the nvidia_gpu driver looks for "NVRM: Xid" lines; '
                    'empty: no Xid is read.'),
    cfg.ListOpt('gpu_critical_xids', default=['48', '62', '63', '64', '74', '79',
                                              '92', '94', '95', '119', '120'],
                help='Xid codes that make a GPU unhealthy (NVIDIA\'s list of '
                     'errors that need a reset or point at the hardware); any other '
                     'Xid is a warning.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

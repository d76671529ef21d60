from oslo_config import cfg

group = cfg.OptGroup('nvme', title='Generic NVMe driver with secure cleanup',
                     help='NVMe controllers handed out whole and cleaned between '
                          'tenants (enabled_drivers = nvme).')

opts = [
    cfg.MultiStrOpt('device_spec', default=[],
                    help='One JSON object per value: vendor_id, product_id, address '
                         '(glob or regex dict) plus clear_action '
                         '(auto|sanitize|format|zero; format requires Format NVM with '
                         'a secure erase, sanitize and zero never format), '
                         'clear_strategy (auto|crypto|block) and lba_size (the block '
                         'size in bytes of the one namespace every cleanup leaves; '
                         'default: the one the device had at discovery).'),
    cfg.IntOpt('cleanup_timeout', default=900, min=1, mutable=True,
               help='Seconds one cleanup may take before the device goes to error, '
                    'counted from its start. A reload applies it to the cleanups '
                    'running too.'),
    cfg.StrOpt('nvme_cli', default='nvme',
               help='The nvme-cli binary (a name on PATH or a path).'),
    cfg.StrOpt('blkdiscard', default='blkdiscard',
               help="util-linux blkdiscard (a name on PATH or a path): the write_zeroes "
                    "action zeroes a namespace with its --zeroout, the kernel's "
                    'BLKZEROOUT.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

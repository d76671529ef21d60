"""Loading the drivers named in [agent] enabled_drivers."""
from importlib import metadata
import logging

from oslo_utils import importutils

from steward.common import exception

LOG = logging.getLogger(__name__)

BUILTIN = {
    'fake': 'steward.drivers.fake.FakeDriver',
    'pci': 'steward.drivers.pci.PciDriver',
    'mdev': 'steward.drivers.mdev.MdevDriver',
    'nvidia_gpu': 'steward.drivers.nvidia_gpu.NvidiaGpuDriver',
    'nvme': 'steward.drivers.nvme.NvmeDriver',
}
# Upstream Cyborg's entry-point names, so an existing cyborg.conf keeps working.
ALIASES = {'fake_driver': 'fake', 'pci_driver': 'pci', 'nvme_driver': 'nvme',
           'nvidia_gpu_driver': 'nvidia_gpu', 'mdev_driver': 'mdev'}


def load(names, conf, host):
    drivers = []
    for raw in names:
        name = ALIASES.get(raw, raw)
        cls = None
        for ep in metadata.entry_points(group='steward.drivers'):
            if ep.name == name:
                cls = ep.load()
                break
        if cls is None and name in BUILTIN:
            cls = importutils.import_class(BUILTIN[name])
        if cls is None:
            raise exception.InvalidConfiguration(
                reason=f'[agent] enabled_drivers names unknown driver {raw!r}')
        drivers.append(cls(conf, host))
        LOG.info('Loaded driver %s (%s)', name, cls.__module__)
    return drivers

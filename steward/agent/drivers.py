"""Loading the drivers named in [agent] enabled_drivers: the ``steward.drivers``
entry points (pyproject.toml), through stevedore."""
import logging

import stevedore

from steward.common import exception

LOG = logging.getLogger(__name__)

NAMESPACE = 'steward.drivers'
# Upstream Cyborg's entry-point names, so an existing cyborg.conf keeps working.
ALIASES = {'fake_driver': 'fake', 'pci_driver': 'pci', 'nvme_driver': 'nvme',
           'nvidia_gpu_driver': 'nvidia_gpu', 'mdev_driver': 'mdev'}


def load(names, conf, host):
    drivers = []
    for raw in names:
        name = ALIASES.get(raw, raw)
        try:
            cls = stevedore.DriverManager(NAMESPACE, name).driver
        except stevedore.exception.NoMatches:
            raise exception.InvalidConfiguration(
                reason=f'[agent] enabled_drivers names unknown driver {raw!r}') from None
        drivers.append(cls(conf, host))
        LOG.info('Loaded driver %s (%s)', name, cls.__module__)
    return drivers

"""Configuration: one module per option group, all registered on the global CONF.

oslo.messaging registers its own options on the global ``cfg.CONF`` (see
``messaging.md``), so Steward uses that object too, like every OpenStack service.
"""
from oslo_config import cfg

from steward.conf import (agent, api, compute, conductor, database, default, health, mdev,
                          middleware, nova, nvidia, nvme, pci, placement, upgrade_levels)

CONF = cfg.CONF

for _mod in (default, api, database, agent, placement, nova, compute, pci, mdev,
             nvidia, nvme, health, conductor, upgrade_levels, middleware):
    _mod.register_opts(CONF)

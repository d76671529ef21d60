"""Entry point for oslo-config-generator (etc/steward-config-generator.conf)."""
from steward.conf import (agent, api, compute, conductor, database, default, health, mdev,
                          nova, nvidia, nvme, pci, placement, upgrade_levels)


def list_opts():
    result = []
    for mod in (default, api, database, agent, placement, nova, compute, pci, mdev,
             nvidia, nvme, health, conductor, upgrade_levels):
        result.extend(mod.list_opts())
    return result

"""Entry point for oslo-config-generator (etc/steward-config-generator.conf)."""
from steward.conf import agent, api, compute, database, default, nova, placement


def list_opts():
    result = []
    for mod in (default, api, database, agent, placement, nova, compute):
        result.extend(mod.list_opts())
    return result

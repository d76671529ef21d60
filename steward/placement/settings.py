"""The embedded Placement's configuration: Placement's own options from an
operator's ``placement.conf``-style file (``[placement] embedded_config_file``),
over Steward's defaults that bound what one ``GET /allocation_candidates`` may
cost, under the few settings Steward owns (its database, noauth2).

Nothing else is read: no /etc/placement/placement.conf, no config directory.
"""
import configparser
import logging

LOG = logging.getLogger(__name__)

# Steward's defaults for Placement options whose upstream defaults leave the cost
# of one request unbounded; the operator's file overrides each. Steward registers
# a host's devices as child providers of its compute node (one per device, total 1),
# the "wide provider tree" of Launchpad bugs 2070257 and 2126751: a request of
# several one-unit groups makes Placement walk the Cartesian product of each group's
# matches, 8 groups over 8 such providers 8**8 = 16.7 million combinations for one
# host, minutes of one core per host.
DEFAULTS = {
    # Upstream: -1, every viable candidate generated before `limit` is applied.
    # 1000 is Nova's own [scheduler] max_placement_results, the `limit` every Nova
    # scheduler sends: Nova is never given fewer candidates than it asks for, and
    # generation stops there instead of after millions. Upstream's advice for wide
    # trees is "not more than 1000" ([workarounds] optimize_for_wide_provider_trees).
    ('placement', 'max_allocation_candidates'): 1000,
    # Upstream: depth-first, which with a cap fills the 1000 from the first hosts
    # it visits (one eight-GPU host alone has 40 320 ways to seat eight one-unit
    # groups) and leaves every other host out; breadth-first takes one candidate
    # from each viable host in turn, so the cap still offers Nova's filters and
    # weighers every host.
    ('placement', 'allocation_candidates_generation_strategy'): 'breadth-first',
    # Upstream: off. It prunes a combination as soon as its first groups already
    # exceed a provider's capacity, instead of building it whole and then dropping
    # it: the same candidates in the same order (Placement skips its final capacity
    # check only because every product was checked on the way), found without
    # walking the combinations that cannot fit, which on one-unit providers are
    # nearly all of them.
    ('workarounds', 'optimize_for_wide_provider_trees'): True,
}

# What Steward sets whatever the file says, and where the operator sets it instead.
OWNED = {
    ('placement_database', 'connection'): '[placement] embedded_connection',
    ('placement_database', 'sync_on_startup'):
        'Steward migrates the schema whenever the embedded Placement starts',
    ('api', 'auth_strategy'): 'the embedded Placement is noauth2 (doc/install.md)',
}


def configure(conf, connection_url, config_file=None):
    """Parse Placement's options into ``conf`` (a ConfigOpts with Placement's
    options registered): ``config_file`` over DEFAULTS, under OWNED."""
    for (group, name), value in DEFAULTS.items():
        conf.set_default(name, value, group=group)
    # Overrides must precede parsing: connection is required and parsing checks it.
    conf.set_override('connection', connection_url, group='placement_database')
    conf.set_override('sync_on_startup', True, group='placement_database')
    conf.set_override('auth_strategy', 'noauth2', group='api')
    files = [config_file] if config_file else []
    conf([], project='placement', default_config_files=files, default_config_dirs=[])
    if config_file:
        for (group, name), instead in OWNED.items():
            if _sets(config_file, group, name):
                LOG.warning('%s sets [%s] %s, which the embedded Placement does not '
                            'use: %s', config_file, group, name, instead)
    # Read now, so that a value the option refuses (oslo.config checks choices and
    # types when an option is read) stops the start, naming it, rather than the
    # first request that needs it.
    LOG.info('Allocation candidates (%s): max_allocation_candidates = %d, '
             'allocation_candidates_generation_strategy = %s, '
             'optimize_for_wide_provider_trees = %s',
             config_file or "Steward's defaults",
             conf.placement.max_allocation_candidates,
             conf.placement.allocation_candidates_generation_strategy,
             conf.workarounds.optimize_for_wide_provider_trees)


def _sets(path, group, name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read(path)
    except configparser.Error:
        return False        # oslo.config read it; what it read is what counts
    return parser.has_section(group) and parser.has_option(group, name)

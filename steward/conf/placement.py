from oslo_config import cfg

from steward.conf import keystoneauth

group = cfg.OptGroup('placement', title='Placement service options')

opts = [
    cfg.BoolOpt('embedded', default=True,
                help='Start the real OpenStack Placement service inside the '
                     'single-host stack (steward serve). Ignored, and treated as '
                     'false, when auth_type or endpoint_override is set.'),
    cfg.HostAddressOpt('embedded_host', default='127.0.0.1',
                       help='Address of the embedded Placement.'),
    cfg.PortOpt('embedded_port', default=8778,
                help='Port of the embedded Placement.'),
    cfg.StrOpt('embedded_connection', secret=True,
               default='sqlite:///$state_path/placement.sqlite',
               help='Database of the embedded Placement.'),
    cfg.IntOpt('embedded_workers', default=2, min=1,
               help='Processes serving the embedded Placement on embedded_host:'
                    'embedded_port (Nova, clients, other hosts). Placement is '
                    'CPU-bound under one Python interpreter, so more processes use '
                    'more cores: a first registration of thousands of providers is '
                    'bounded by this. Each process takes about 90 MB.'),
    cfg.IntOpt('embedded_threads', default=4, min=1,
               help='Requests each process of the embedded Placement serves at '
                    'once. Threads add no throughput to a process (one '
                    'interpreter), but a long request, such as a query of '
                    'allocation candidates over many providers, then holds one '
                    'thread instead of the whole process: the requests behind it '
                    'take turns with it instead of waiting for it to end.'),
    cfg.IntOpt('embedded_steward_workers', default=1, min=1,
               help="Processes of the embedded Placement that serve steward "
                    "serve's own requests only (binds' reservations, inventories, "
                    'traits, the drift repair), on a Unix socket of their own: '
                    'whatever Nova and other clients send to embedded_port (a '
                    'query of allocation candidates running for minutes) never '
                    "holds a worker Steward's writes need. Each process takes about "
                    '90 MB.'),
    cfg.StrOpt('embedded_config_file',
               help="A configuration file of OpenStack Placement's own options "
                    '(placement.conf style) for the embedded Placement, e.g. '
                    '[placement] max_allocation_candidates, '
                    'allocation_candidates_generation_strategy, '
                    'randomize_allocation_candidates, '
                    'allocation_conflict_retry_count; [workarounds] '
                    'optimize_for_wide_provider_trees. Unset: Steward\'s defaults, '
                    'which bound the cost of one query of allocation candidates: '
                    'max_allocation_candidates = 1000, '
                    'allocation_candidates_generation_strategy = breadth-first, '
                    'optimize_for_wide_provider_trees = true (the file overrides '
                    'each). Its [placement_database] connection and [api] '
                    'auth_strategy are not used: embedded_connection, noauth2. '
                    'Read when the embedded Placement starts.'),
    cfg.IntOpt('embedded_restart_attempts', default=5, min=1,
               help='Times in a row steward serve tries to start its embedded '
                    'Placement again after it died (waiting 1, 2, 4 ... up to 30 '
                    'seconds before each try) before it gives up and exits with a '
                    'non-zero status, for its service manager to restart it. A '
                    'child that stayed up for a minute starts the count over.'),
    cfg.StrOpt('compute_node_name',
               help='Deprecated alias of [agent] resource_provider_name.'),
    cfg.BoolOpt('create_compute_node', default=True,
                help='Create the compute-node root provider when Nova has not. '
                     'Single-host and test stacks need it; with Nova it is harmless '
                     'because Nova adopts a provider of the same name.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    keystoneauth.register(conf, group, 'placement')
    conf.set_default('valid_interfaces', ['internal', 'public'], group=group.name)


def list_opts():
    return [(group, opts + keystoneauth.opts())]

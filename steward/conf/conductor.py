from oslo_config import cfg

group = cfg.OptGroup('conductor', title='Conductor',
                     help='The conductor\'s periodic tasks and how long it waits for '
                          'agents. Every conductor runs the periodic tasks; running '
                          'them in several at once is harmless (each state change is '
                          'a compare-and-swap).')

opts = [
    cfg.FloatOpt('periodic_interval', default=60.0, min=0.01, mutable=True,
                 deprecated_opts=[cfg.DeprecatedOpt('periodic_interval',
                                                    group='DEFAULT')],
                 help='Seconds between two runs of the periodic tasks: stuck '
                      'cleanups, lost cleanup requests, missed releases, '
                      'accelerator requests left in Deleting or Initial, Placement '
                      'inventory and reservations out of line with the devices, and '
                      '(with [nova]) bound accelerator requests whose instance Nova '
                      'deleted.'),
    cfg.FloatOpt('agent_ping_timeout', default=2.0, min=0.01, mutable=True,
                 help='Seconds the conductor waits for an agent to answer ping '
                      'before it asks it to clean a released device. A device whose '
                      'agent does not answer stays allocated (and reserved) until the '
                      'agent starts again or a periodic retry reaches it.'),
    cfg.FloatOpt('cleanup_grace', default=300.0, min=0.0, mutable=True,
                 help='Seconds added to [nvme] cleanup_timeout before a device in '
                      'pending_cleaning or cleaning whose cleanup shows no progress '
                      'is moved to error by the conductor (the agent enforces '
                      'cleanup_timeout itself; this catches an agent that died or '
                      'never got the request).'),
    cfg.FloatOpt('cleanup_resend_interval', default=60.0, min=0.0, mutable=True,
                 help='Seconds a device may wait in pending_cleaning without its '
                      'cleanup starting before cleanup_device is sent to its agent '
                      'again; also how long a device that needs cleaning may stay '
                      'allocated with no accelerator request before the conductor '
                      'asks its agent to clean it.'),
    cfg.FloatOpt('stale_delete_grace', default=120.0, min=0.0, mutable=True,
                 help='Seconds an accelerator request may stay in Deleting before '
                      'the periodic task finishes its delete (a younger one may '
                      'still be finished by the request that started it).'),
    cfg.FloatOpt('initial_arq_max_age', default=3600.0, min=60.0, mutable=True,
                 help='Seconds an accelerator request may stay Initial with no '
                      'instance before the periodic task deletes it: a create whose '
                      'answer was lost (the API died after its commit, the client '
                      'gave up) leaves one that no client knows. Nova binds the '
                      'requests it creates within seconds of creating them.'),
    cfg.FloatOpt('orphan_grace', default=600.0, min=0.0, mutable=True,
                 help='Seconds Nova must keep answering 404 for an instance that '
                      'holds bound accelerator requests before the conductor '
                      'deletes them as Nova\'s DELETE ?instance= would (releasing '
                      'and cleaning their devices); and seconds Nova must keep '
                      'saying that such an instance is on another host than some '
                      'of its accelerator requests\' devices, and not moving, '
                      'before those (the set a finished move left behind) are '
                      'deleted. Only with [nova] configured; at most 100 instances '
                      'are asked per periodic run.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

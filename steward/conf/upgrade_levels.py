"""RPC version caps for rolling upgrades (Nova's ``[upgrade_levels]``).

During an upgrade old and new services share one message bus. Capping what a
service *sends* to a service of the other kind keeps the old ones answering: an
upgraded API or agent that still talks to old conductors sets ``conductor`` to
the conductors' version, upgraded conductors talking to old agents set ``agent``.
Unset means the newest version this release knows; remove the caps once every
service runs the new release.
"""
from oslo_config import cfg

group = cfg.OptGroup('upgrade_levels', title='RPC version caps for rolling upgrades',
                     help='Set a cap while services of the previous release are still '
                          'running; unset (the default) sends the newest version.')

opts = [
    cfg.StrOpt('conductor', sample_default='<newest>',
               help='Highest conductor RPC API version the API and agents send, as '
                    'MAJOR.MINOR (e.g. 1.0 while conductors of the previous release '
                    'still run). A call that needs a newer version is refused in '
                    'the sender instead of reaching a conductor that cannot serve it.'),
    cfg.StrOpt('agent', sample_default='<newest>',
               help='Highest agent RPC API version conductors send, as MAJOR.MINOR '
                    '(e.g. 1.0 while agents of the previous release still run). Unset: '
                    'each agent is asked which version it speaks.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

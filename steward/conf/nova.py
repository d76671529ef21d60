from oslo_config import cfg

from steward.conf import keystoneauth

group = cfg.OptGroup('nova', title='Nova (compute) options',
                     help='Where bind results are posted as accelerator-request-bound '
                          'events, and whom the conductor asks whether the instances '
                          'holding bound accelerator requests still exist (orphan '
                          'check; the credentials must see every project\'s servers). '
                          'Nothing configured: neither is done.')

opts = [
    cfg.FloatOpt('event_timeout', default=10.0, min=0.1, mutable=True,
                 help='Seconds one request to Nova may take (POST '
                      '/os-server-external-events, GET /servers/{id} of the '
                      'orphan check).'),
    cfg.FloatOpt('event_retry_delay', default=2.0, min=0,
                 deprecated_for_removal=True,
                 deprecated_reason='Events Nova answers 422 (instance not yet on a '
                                   'host) are no longer sent again: Nova never needs '
                                   'the copy (its compute reads the bound ARQs '
                                   'after it has a host) and logged it as an '
                                   'unexpected event. The value is ignored.',
                 help='Deprecated for removal, and ignored: an event Nova answers '
                      '422 is no longer sent again (doc/nova.md). Was: seconds '
                      'before such an event was sent once more.'),
    cfg.IntOpt('event_connect_attempts', default=4, min=1, mutable=True,
               help='Attempts to reach Nova before events are given up (Nova being '
                    'restarted, a load balancer failing over): keystoneauth '
                    'retries the connection (connect_retries = attempts - 1), 0.5 s '
                    'apart and doubling; then one WARNING line. [nova] '
                    'connect_retries, when set, takes precedence.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    keystoneauth.register(conf, group, 'compute')


def list_opts():
    return [(group, opts + keystoneauth.opts())]

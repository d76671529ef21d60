from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

group = cfg.OptGroup('nova', title='Nova (compute) options',
                     help='Where bind results are posted as accelerator-request-bound '
                          'events. Nothing configured: the events are skipped.')

opts = [
    cfg.FloatOpt('event_timeout', default=10.0, min=0.1,
                 help='Seconds one POST /os-server-external-events may take.'),
    cfg.FloatOpt('event_retry_delay', default=2.0, min=0,
                 help='Seconds before an event Nova answered 422 (instance not yet '
                      'on a host) is sent once more.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)
    ks_loading.register_session_conf_options(conf, group.name)
    ks_loading.register_auth_conf_options(conf, group.name)
    ks_loading.register_adapter_conf_options(conf, group.name, include_deprecated=False)
    conf.set_default('service_type', 'compute', group=group.name)


def list_opts():
    from keystoneauth1 import loading
    return [(group, opts
             + loading.get_session_conf_options()
             + loading.get_auth_common_conf_options()
             + loading.get_auth_plugin_conf_options('password')
             + loading.get_adapter_conf_options(include_deprecated=False))]

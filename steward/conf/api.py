from oslo_config import cfg

group = cfg.OptGroup('api', title='REST API options')

opts = [
    cfg.HostAddressOpt('host_ip', default='127.0.0.1',
                       help='Address the API listens on.'),
    cfg.PortOpt('port', default=6666, help='Port the API listens on.'),
    cfg.StrOpt('public_endpoint',
               help='Base URL clients reach the API at, e.g. '
                    'https://cloud.example/accelerator. Links in responses (and the '
                    'self link keystoneauth follows after version discovery) are built '
                    'on it. Unset: the URL of the incoming request.'),
    cfg.StrOpt('auth_strategy', default='noauth', choices=['noauth', 'keystone'],
               help='noauth: identity from X-Project-Id/X-User-Id/X-Roles/'
                    'X-Service-Roles headers when present, admin+service otherwise. '
                    'keystone: validate tokens with keystonemiddleware '
                    '([keystone_authtoken]).'),
    cfg.BoolOpt('allow_insecure_noauth', default=False,
                help='INSECURE: let auth_strategy = noauth serve on an address '
                     'that is not loopback. Under noauth every caller who reaches '
                     'the port is an admin with a service token (identity headers '
                     'are trusted as sent). Without this option steward api and '
                     'steward serve refuse to start with noauth on any '
                     'non-loopback address (the API, the embedded Placement); with '
                     'it they start and log a WARNING at every start. The fix is '
                     'auth_strategy = keystone, not this option.'),
    cfg.ListOpt('service_token_roles', default=['service'],
                help='Roles of a service token that count as a service caller '
                     '(binding, unbinding and deleting ARQs by instance). The one '
                     'place they are set: keystonemiddleware\'s '
                     '[keystone_authtoken] service_token_roles is set from it.'),
    cfg.StrOpt('metrics_listen', default='127.0.0.1:6667',
               help='HOST:PORT where steward api and steward serve serve their '
                    'Prometheus metrics at /metrics, apart from the API port (which '
                    'answers 404 there): the listener has no authentication, so keep '
                    'it on loopback or a management network. IPv6: [::1]:6667. '
                    'Empty: no metrics endpoint. With workers > 1 the steward api '
                    'process serves it, its workers\' bind observations summed '
                    '(prometheus_client\'s multiprocess mode).'),
    cfg.ListOpt('trusted_proxies', default=[],
                help='Addresses or CIDRs (e.g. 192.0.2.10, 10.0.0.0/24, ::1) of the '
                     'reverse proxies whose Forwarded / X-Forwarded-Proto / '
                     'X-Forwarded-Host / X-Forwarded-For headers the API honours, '
                     'when [oslo_middleware] enable_proxy_headers_parsing is true: a '
                     'TLS-terminating HAProxy sends X-Forwarded-Proto: https and the '
                     'links in responses come out https://. Headers from any other '
                     'peer are ignored (a client could otherwise choose the links '
                     'and the address in the request log). Empty: no peer is '
                     'trusted. The ASGI server\'s own proxy-header handling must be '
                     'off (doc/install.md).'),
    cfg.IntOpt('workers', default=1, min=1, deprecated_name='api_workers',
               help='Processes serving steward api: above 1, gunicorn worker '
                    'processes running uvicorn on the same port (one Python process '
                    'uses at most one core, so more processes serve more clients at '
                    'once; each takes about 100 MB). Each runs the accelerator '
                    'requests\' operations itself (with [placement] set, '
                    'doc/multihost.md) and reaches the conductors over RPC for the '
                    'rest, like any API process. steward serve is always one '
                    'process and ignores it.'),
    cfg.IntOpt('handler_threads', min=1, sample_default='<unset>',
               help='Requests one API process works on at once; the others wait '
                    'on its event loop, which reads them meanwhile. Each thread '
                    'takes a database connection while it works. Unset: 2 on SQLite '
                    '(its writers are serial), 4 on PostgreSQL and MariaDB, and '
                    'fewer (at least 1) when [api] workers would run more than 4 '
                    'per core of the host (4 workers on 2 cores: 2 each): more '
                    'threads than that queue on the interpreter\'s lock after '
                    'every database round trip, or on the cores, which lengthens '
                    'the time a bind holds its device (doc/multihost.md, sizing). '
                    'A process whose requests wait on slow peers rather than on '
                    'the CPU may use more.'),
]


def register_opts(conf):
    conf.register_group(group)
    conf.register_opts(opts, group=group)


def list_opts():
    return [(group, opts)]

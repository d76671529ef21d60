"""oslo.middleware's options, as every OpenStack API registers them: ``[cors]``,
``[healthcheck]`` and ``[oslo_middleware]`` (``max_request_body_size``,
``enable_proxy_headers_parsing``). Steward serves ASGI, so it implements these
middlewares itself (steward/api/middleware.py) on oslo.middleware's own option
lists: an operator's existing settings mean the same thing here. The sample file
lists them through the ``oslo.middleware.*`` generator namespaces.
"""
from oslo_middleware import cors
from oslo_middleware import http_proxy_to_wsgi
from oslo_middleware import sizelimit
from oslo_middleware.healthcheck import opts as healthcheck_opts

# Bodies are a device profile or an ARQ patch, a few KiB; a batch of ARQ patches
# for a large instance stays far below this. oslo.middleware's 112 KiB would
# refuse nothing real either, but 1 MiB is what Steward has always accepted.
MAX_REQUEST_BODY_SIZE = 1024 * 1024

# What a browser client (Horizon, Skyline) sends and must read.
CORS_ALLOW_HEADERS = ['X-Auth-Token', 'X-Openstack-Request-Id', 'OpenStack-API-Version',
                      'X-Project-Id', 'X-User-Id', 'X-Roles', 'X-Service-Roles',
                      'Content-Type']
CORS_EXPOSE_HEADERS = ['X-Auth-Token', 'X-Openstack-Request-Id', 'OpenStack-API-Version',
                       'OpenStack-API-Minimum-Version', 'OpenStack-API-Maximum-Version']
CORS_ALLOW_METHODS = ['GET', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS']


def set_lib_defaults():
    """Steward's defaults for oslo.middleware's options (also the
    ``oslo.config.opts.defaults`` hook, so the sample file shows them)."""
    cors.set_defaults(allow_headers=CORS_ALLOW_HEADERS,
                      expose_headers=CORS_EXPOSE_HEADERS,
                      allow_methods=CORS_ALLOW_METHODS)
    from oslo_config import cfg
    cfg.set_defaults(sizelimit.OPTS, max_request_body_size=MAX_REQUEST_BODY_SIZE)


def register_opts(conf):
    conf.register_opts(cors.OPTS, group='cors')
    conf.register_opts(sizelimit.OPTS, group='oslo_middleware')
    conf.register_opts(http_proxy_to_wsgi.OPTS, group='oslo_middleware')
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group='healthcheck')
    # disable_by_file's own option: the plugin registers it when loaded, the
    # sample file and a config check need it before.
    conf.register_opts(healthcheck_opts.DISABLE_BY_FILE_OPTS, group='healthcheck')
    set_lib_defaults()


def list_opts():
    # Listed by oslo.middleware's namespaces in the generator configuration.
    return []


def documented_opts():
    """(group, options) of oslo.middleware's options Steward reads, for
    doc/configuration.md (tools/docs.py), with Steward's defaults."""
    set_lib_defaults()
    return [('oslo_middleware', sizelimit.OPTS + http_proxy_to_wsgi.OPTS),
            ('cors', cors.OPTS),
            ('healthcheck', healthcheck_opts.HEALTHCHECK_OPTS
             + healthcheck_opts.DISABLE_BY_FILE_OPTS)]

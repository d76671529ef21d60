"""What a command checks of its configuration before it starts anything: a
separate service's transport and database, noauth on a routable address, the RPC
version caps of [upgrade_levels]. Each refuses with InvalidConfiguration naming
the option to change, rather than time out on first use."""
from oslo_log import log as logging

from steward.conf import CONF

LOG = logging.getLogger(__name__)


# Transports that only reach the same process: the separate services must share a
# broker instead.
IN_PROCESS_TRANSPORTS = ('kombu+stewardmem', 'kombu+memory', 'fake')


def check_service_config(role):
    """Refuse a configuration the separate service ``role`` cannot work with, at
    start and with the option to change, rather than time out on first use."""
    from steward.common import exception
    from steward.common import netutils
    url = CONF.transport_url or ''
    if url.split(':', 1)[0] in IN_PROCESS_TRANSPORTS:
        raise exception.InvalidConfiguration(
            reason=f'steward {role} runs as a separate service but [DEFAULT] '
                   f'transport_url = {netutils.redacted_url(url)} only reaches services in the same '
                   f'process; set it to the shared broker, e.g. '
                   f'rabbit://steward:PASSWORD@CONTROLLER:5672/')
    if role in ('api', 'conductor'):
        connection = CONF.database.connection or ''
        if connection.startswith('sqlite'):
            LOG.warning('steward %s uses SQLite (%s): every api and conductor process '
                        'must then run on this host; set [database] connection to '
                        'PostgreSQL for a multi-host control plane', role,
                        netutils.redacted_url(connection))
    rpc_version_cap('conductor')
    rpc_version_cap('agent')


def is_loopback(host):
    """True when every address ``host`` names is a loopback address (an address
    that does not resolve is not)."""
    import ipaddress
    import socket
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split('%')[0]).is_loopback
                               for a in found)


def check_exposure(listeners):
    """Refuse noauth on a routable address. ``listeners``: (what, host) of every
    socket this process serves without authentication when auth_strategy is
    noauth. With [api] allow_insecure_noauth the start goes on, with a WARNING."""
    from steward.common import exception
    if CONF.api.auth_strategy != 'noauth':
        return
    exposed = [f'{what} on {host}' for what, host in listeners if not is_loopback(host)]
    if not exposed:
        return
    if CONF.api.allow_insecure_noauth:
        LOG.warning('INSECURE: auth_strategy = noauth with %s: every caller who '
                    'reaches it is an admin ([api] allow_insecure_noauth = true). '
                    'Set [api] auth_strategy = keystone.', ', '.join(exposed))
        return
    raise exception.InvalidConfiguration(
        reason=f'[api] auth_strategy = noauth would make every caller an admin on '
               f'{", ".join(exposed)} (not loopback); set [api] auth_strategy = '
               f'keystone, or listen on 127.0.0.1, or set [api] '
               f'allow_insecure_noauth = true to accept that')


def _newest_rpc_version(service):
    if service == 'conductor':
        from steward.conductor import rpcapi
    else:
        from steward.agent import rpcapi
    return rpcapi.RPC_API_VERSION


def rpc_version_cap(service):
    """``[upgrade_levels] <service>`` checked against what this release speaks:
    None (send the newest) when unset."""
    from steward.common import exception
    value = (CONF.upgrade_levels[service] or '').strip()
    if not value:
        return None
    newest = _newest_rpc_version(service)
    major, newest_minor = (int(p) for p in newest.split('.'))
    try:
        want_major, want_minor = (int(p) for p in value.split('.'))
    except ValueError:
        want_major = want_minor = None
    if want_major != major or not 0 <= want_minor <= newest_minor:
        raise exception.InvalidConfiguration(
            reason=f'[upgrade_levels] {service} = {value!r}: expected a {service} RPC '
                   f'version from {major}.0 to {newest} (MAJOR.MINOR), or unset for '
                   f'the newest')
    return f'{want_major}.{want_minor}'



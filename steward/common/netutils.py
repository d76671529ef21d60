"""Addresses of the servers Steward starts itself."""
import re

from oslo_config import types

_HOST = types.HostDomain()
_PORT = types.Port(min=1)


def local_url(host, port):
    """The URL that reaches a server listening on ``host:port`` from this machine:
    a wildcard address is reached on loopback, IPv6 hosts are bracketed."""
    if host in ('0.0.0.0', ''):
        host = '127.0.0.1'
    elif host == '::':
        host = '::1'
    return 'http://%s:%d' % ('[%s]' % host if ':' in host else host, int(port))


def split_host_port(value):
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port), each checked by
    oslo.config's own types (an address or a host name; a port from 1 to 65535).
    ValueError otherwise."""
    host, sep, port = (value or '').strip().rpartition(':')
    if host.startswith('[') and host.endswith(']'):
        host = host[1:-1]
    elif ':' in host:
        raise ValueError(f'{value!r}: an IPv6 address takes brackets, [::1]:PORT')
    if not sep or not host or not port:
        raise ValueError(f'{value!r}: no HOST:PORT')
    return _HOST(host), _PORT(port)


# user:password@ of each host of a URL (a transport URL may name several).
_USERINFO = re.compile(r'(?<=[/,])([^/@,:]*):[^/@,]*@')


def redacted_url(url):
    """``url`` with the password of each ``user:password@`` replaced, for
    messages. (oslo_utils.strutils.mask_password masks ``password=...`` pairs,
    not a URL's userinfo: it leaves rabbit://u:secret@host as it is.)"""
    return _USERINFO.sub(r'\1:***@', url or '')

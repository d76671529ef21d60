"""Addresses of the servers Steward starts itself."""


def local_url(host, port):
    """The URL that reaches a server listening on ``host:port`` from this machine:
    a wildcard address is reached on loopback, IPv6 hosts are bracketed."""
    if host in ('0.0.0.0', ''):
        host = '127.0.0.1'
    elif host == '::':
        host = '::1'
    return 'http://%s:%d' % ('[%s]' % host if ':' in host else host, int(port))

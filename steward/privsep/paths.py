"""What the daemons accept as a device: checked in the daemon, against its own
configuration, never trusting the caller's idea of where devices live."""
import os
import re

from oslo_config import cfg

from steward.common import exception

# Controller (nvme0) and namespace (nvme0n1) nodes; not partitions, not the
# generic ng nodes, not multipath nvmeXcYnZ paths.
NVME_NODE = re.compile(r'nvme[0-9]{1,4}(n[0-9]{1,5})?')


def refuse(call, reason):
    return exception.PrivsepRefused(call=call, reason=reason)


def nvme_node(call, path, namespace=None):
    """``path`` when it names an NVMe node directly in ``[DEFAULT] dev_root``;
    ``namespace`` True/False also requires a namespace/controller node.

    The check is on the name, not the target: dev_root is root's (/dev), so the
    caller cannot plant a link there, and the simulator's nodes are links."""
    if not isinstance(path, str) or '\0' in path:
        raise refuse(call, f'device {path!r} is not a path')
    root = os.path.normpath(cfg.CONF.dev_root)
    name = os.path.basename(path)
    if os.path.normpath(path) != os.path.join(root, name) or \
            not NVME_NODE.fullmatch(name):
        raise refuse(call, f'{path!r} is not an NVMe node in dev_root {root}')
    is_ns = 'n' in name[4:]
    if namespace is not None and is_ns != namespace:
        kind = 'namespace' if namespace else 'controller'
        raise refuse(call, f'{path!r} is not a {kind} node')
    return os.path.join(root, name)


def integer(call, name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise refuse(call, f'{name} {value!r} is not an integer in [{low}, {high}]')
    return value

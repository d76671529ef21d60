"""Pool names (issue 52): what makes a driver's devices of one host
interchangeable, as the name of the one resource provider they share
(steward/conductor/report/providers.py makes it of the deployables whose
``pool`` attribute, steward.drivers.objects.POOL_KEY, holds it)."""
import hashlib
import json

from oslo_utils import strutils


def pool_name(host, resource_class, numa_node, key):
    """``<host>_<RC>_numa<N>_<digest>`` (``nonuma`` where the kernel gives no
    node): readable, and stable across reboots. ``key``: whatever else makes
    devices interchangeable (the configuration entry's matching keys, traits,
    a cleanup policy), any JSON value; its digest keeps two entries of one
    resource class on one node two pools. Pools never span NUMA nodes."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    node = 'nonuma' if numa_node is None else f'numa{numa_node}'
    return f'{host}_{resource_class}_{node}_{digest}'


def pool_tag(fields):
    """A device_spec entry's ``pool`` tag, read as bool_tag reads any."""
    return bool_tag(fields, 'pool')


def bool_tag(fields, key):
    """A device_spec entry's boolean tag ``key`` exactly as Nova 34 reads its own
    (nova/pci/devspec.py ``_normalize_device_spec_tag``): absent or null is
    false; otherwise oslo.utils' strict reading of a JSON boolean or its text
    (true/false, yes/no, on/off, y/n, t/f, 1/0 in any case); ValueError for
    anything else."""
    value = fields.get(key)
    if value is None:
        return False
    try:
        return strutils.bool_from_string(value, strict=True)
    except ValueError as err:
        raise ValueError(f'{key} {json.dumps(value)} is not a boolean ({err})')

"""Nova-style ``device_spec`` entries: parsing (one JSON object per value of a
multi-valued option) and matching PCI devices against them.

Matching follows Nova's rules: ``vendor_id``/``product_id`` (hex, case-insensitive,
``*`` or absent = any), ``address`` either a glob string (``*:0a:00.*``, fields may
be ``*``, the domain may be omitted) or a dict of per-field regular expressions
(``{"domain": ".*", "bus": "0a", "slot": "00", "function": "[1-3]"}``), and
``devname`` (a network interface name, resolved through ``<sysfs>/class/net``).
Keys a driver does not understand are left for the driver (``managed``,
``clear_action``, ``resource_class``, ``traits``...): each driver validates its own.
"""
import dataclasses
import fnmatch
import json
import os
import re

from steward.common import exception

MATCH_KEYS = ('vendor_id', 'product_id', 'address', 'devname')
ADDRESS_FIELDS = ('domain', 'bus', 'slot', 'function')


@dataclasses.dataclass
class DeviceSpec:
    raw: str                    # the configured text, quoted in error messages
    fields: dict
    _address_regex: dict = None
    _address_glob: tuple = None

    def get(self, key, default=None):
        return self.fields.get(key, default)

    def matches(self, device, sysfs_root='/sys'):
        vendor = self.fields.get('vendor_id')
        if vendor not in (None, '*') and _norm_hex(vendor) != device.vendor_id:
            return False
        product = self.fields.get('product_id')
        if product not in (None, '*') and _norm_hex(product) != device.product_id:
            return False
        addr = device.address
        if self._address_regex is not None:
            for field in ADDRESS_FIELDS:
                pattern = self._address_regex.get(field)
                if pattern is not None and not pattern.fullmatch(getattr(addr, field)):
                    return False
        if self._address_glob is not None:
            for want, have in zip(self._address_glob,
                                  (addr.domain, addr.bus, addr.slot, addr.function)):
                if not fnmatch.fnmatchcase(have, want):
                    return False
        devname = self.fields.get('devname')
        if devname is not None and str(addr) != _netdev_address(sysfs_root, devname):
            return False
        return True


def _norm_hex(value):
    value = str(value).strip().lower()
    return (value[2:] if value.startswith('0x') else value).zfill(4)


def _netdev_address(sysfs_root, name):
    try:
        return os.path.basename(os.readlink(
            os.path.join(sysfs_root, 'class', 'net', name, 'device')))
    except OSError:
        return None


def _parse_glob(raw, text):
    text = text.strip().lower()
    parts = text.split(':')
    if len(parts) == 2:
        parts = ['*'] + parts
    if len(parts) != 3 or '.' not in parts[2]:
        raise ValueError(f'address {text!r} is not [domain:]bus:slot.function')
    slot, _, function = parts[2].partition('.')
    glob = (parts[0] or '*', parts[1] or '*', slot or '*', function or '*')
    widths = (4, 2, 2, 1)
    return tuple(g if '*' in g or '?' in g or '[' in g else g.zfill(w)
                 for g, w in zip(glob, widths))


def _parse_regex(mapping):
    unknown = set(mapping) - set(ADDRESS_FIELDS)
    if unknown:
        raise ValueError(f'unknown address field(s) {sorted(unknown)}')
    compiled = {}
    for field, pattern in mapping.items():
        if not isinstance(pattern, str):
            raise ValueError(f'address field {field} must be a string regex')
        try:
            compiled[field] = re.compile(pattern, re.IGNORECASE)
        except re.error as err:
            raise ValueError(f'address field {field}: bad regex ({err})')
    return compiled


def parse(raw, option='device_spec'):
    """One configured value -> DeviceSpec. Raises InvalidConfiguration quoting it."""
    try:
        fields = json.loads(raw)
    except (TypeError, ValueError) as err:
        raise exception.InvalidConfiguration(
            reason=f'{option} entry {raw!r} is not valid JSON ({err})')
    if not isinstance(fields, dict):
        raise exception.InvalidConfiguration(
            reason=f'{option} entry {raw!r} must be a JSON object')
    spec = DeviceSpec(raw=raw, fields=fields)
    try:
        for key in ('vendor_id', 'product_id'):
            value = fields.get(key)
            if value is not None and value != '*' and not re.fullmatch(
                    r'(0x)?[0-9a-fA-F]{1,4}', str(value)):
                raise ValueError(f'{key} {value!r} is not a 4-digit hex id')
        address = fields.get('address')
        if isinstance(address, dict):
            spec._address_regex = _parse_regex(address)
        elif isinstance(address, str):
            spec._address_glob = _parse_glob(raw, address)
        elif address is not None:
            raise ValueError('address must be a string glob or a dict of regexes')
        if 'devname' in fields and 'address' in fields:
            raise ValueError('devname and address cannot both be given')
    except ValueError as err:
        raise exception.InvalidConfiguration(reason=f'{option} entry {raw!r}: {err}')
    return spec


def parse_all(values, option='device_spec'):
    return [parse(v, option) for v in values or []]


def first_match(specs, device, sysfs_root='/sys'):
    return next((s for s in specs if s.matches(device, sysfs_root)), None)

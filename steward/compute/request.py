"""Flavor + device profile -> a Placement granular request, as Nova builds it.

* Nova's own groups come from the flavor: the unsuffixed group gets VCPU,
  MEMORY_MB and DISK_GB from ``vcpus``/``ram``/``disk``, overridden or extended by
  ``resources:RC=N`` and ``trait:T=required|forbidden`` extra specs; numbered
  groups come from ``resources<S>:``/``trait<S>:`` keys (``resources1:``,
  ``resources_GPU:``).
* Device-profile group N becomes a group with requester id ``device_profile_<N>``
  and Placement suffix ``_DEVICE_PROFILE_<N>`` (mapping key in allocation
  candidates: the same string); ``OWNER_CYBORG`` is required in each, ``accel:``
  keys are not Placement's business. (Nova 34 itself uses the requester id as the
  suffix, ``resourcesdevice_profile_<N>``, and requires no OWNER_CYBORG there:
  bench/pools.py sends its query string, checked against the nova 34.0.0 wheel.
  Placement treats either suffix alike.)
* The flavor's ``group_policy`` governs every group (spec 3).
* OWNER_NOVA pre-filter: ``root_required=OWNER_NOVA`` (as Nova 34 sends it), and
  each of Nova's own groups requires ``OWNER_NOVA``. Placement satisfies the
  required traits of the *unsuffixed* group with the union of the providers that
  serve it (measured on Placement 1.39: ``required=OWNER_NOVA`` alone still lets a
  Cyborg device provide that group's resources, because the root has the trait), so
  that group also forbids ``OWNER_CYBORG``; a suffixed group is one provider and the
  required trait is enough.
"""
import dataclasses
import json
import re

from steward.common import exception

OWNER_CYBORG = 'OWNER_CYBORG'
OWNER_NOVA = 'OWNER_NOVA'
DEVICE_PROFILE_SPEC = 'accel:device_profile'
GROUP_POLICIES = ('none', 'isolate')
_FLAVOR_RESOURCES = (('vcpus', 'VCPU'), ('ram', 'MEMORY_MB'), ('disk', 'DISK_GB'))
# resources[<suffix>]:<RC> / trait[<suffix>]:<TRAIT>; Placement suffixes are
# [a-zA-Z0-9_-]{1,64}.
_SPEC_KEY = re.compile(r'^(resources|trait)([A-Za-z0-9_-]{0,64}):(.+)$')
_NAME = re.compile(r'^[A-Z0-9_]+$')


@dataclasses.dataclass
class RequestGroup:
    suffix: str                         # '' = the unsuffixed group
    requester_id: str | None = None     # device_profile_<N> for profile groups
    resources: dict = dataclasses.field(default_factory=dict)
    required: set = dataclasses.field(default_factory=set)
    forbidden: set = dataclasses.field(default_factory=set)

    @property
    def mapping_key(self):
        """The key of this group in an allocation candidate's ``mappings``."""
        return self.suffix

    def query(self):
        """[(param, value)] for GET /allocation_candidates."""
        out = []
        resources = {rc: n for rc, n in self.resources.items() if n > 0}
        if resources:
            out.append(('resources' + self.suffix,
                        ','.join(f'{rc}:{n}' for rc, n in sorted(resources.items()))))
        traits = sorted(self.required) + ['!' + t for t in sorted(self.forbidden)]
        if traits and resources:
            out.append(('required' + self.suffix, ','.join(traits)))
        return out


@dataclasses.dataclass
class ResourceRequest:
    groups: list
    group_policy: str | None
    root_required: set
    device_profile: str | None

    def group(self, suffix):
        return next(g for g in self.groups if g.suffix == suffix)

    def profile_groups(self):
        return [g for g in self.groups if g.requester_id]

    def query(self, in_tree=None):
        params = []
        for g in self.groups:
            params += g.query()
        if self.root_required:
            params.append(('root_required', ','.join(sorted(self.root_required))))
        if self.group_policy:
            params.append(('group_policy', self.group_policy))
        if in_tree:
            params.append(('in_tree', in_tree))
        return params


@dataclasses.dataclass
class Flavor:
    name: str
    vcpus: int
    ram: int
    disk: int
    extra_specs: dict

    @property
    def device_profile(self):
        return self.extra_specs.get(DEVICE_PROFILE_SPEC) or None

    def to_dict(self):
        return dataclasses.asdict(self)


def _non_negative_int(doc, key, default=None):
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise exception.FlavorInvalid(reason=f'{key} must be a non-negative integer, '
                                             f'not {json.dumps(value)}')
    return value


def parse_flavor(doc):
    """A Flavor from Nova's representation (the dict of ``GET /flavors/{id}``,
    optionally wrapped as ``{"flavor": {...}}``)."""
    if isinstance(doc, dict) and set(doc) == {'flavor'}:
        doc = doc['flavor']
    if not isinstance(doc, dict):
        raise exception.FlavorInvalid(reason='a flavor is a JSON object')
    name = doc.get('name')
    if not isinstance(name, str) or not name.strip():
        raise exception.FlavorInvalid(reason='name must be a non-empty string')
    vcpus = _non_negative_int(doc, 'vcpus')
    ram = _non_negative_int(doc, 'ram')
    disk = _non_negative_int(doc, 'disk', 0)
    if vcpus < 1 or ram < 1:
        raise exception.FlavorInvalid(reason='vcpus and ram must be at least 1')
    specs = doc.get('extra_specs', {})
    if not isinstance(specs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in specs.items()):
        raise exception.FlavorInvalid(reason='extra_specs must map strings to strings')
    policy = specs.get('group_policy')
    if policy is not None and policy not in GROUP_POLICIES:
        raise exception.FlavorInvalid(reason=f'group_policy {policy!r} is not one of '
                                             f'{", ".join(GROUP_POLICIES)}')
    dp = specs.get(DEVICE_PROFILE_SPEC)
    if dp is not None and not dp.strip():
        raise exception.FlavorInvalid(reason=f'{DEVICE_PROFILE_SPEC} is empty')
    return Flavor(name=name, vcpus=vcpus, ram=ram, disk=disk, extra_specs=dict(specs))


def _amount(value, where):
    try:
        amount = int(str(value).strip())
    except ValueError:
        amount = -1
    if amount < 0:
        raise ValueError(f'{where}: amount {value!r} is not a non-negative integer')
    return amount


def _add_trait(group, trait, value, where):
    if not _NAME.match(trait):
        raise ValueError(f'{where}: {trait!r} is not a trait name')
    if value == 'required':
        group.required.add(trait)
    elif value == 'forbidden':
        group.forbidden.add(trait)
    else:
        raise ValueError(f'{where}: {value!r} is neither required nor forbidden')


def _flavor_groups(flavor):
    base = RequestGroup(suffix='', resources={
        rc: getattr(flavor, attr) for attr, rc in _FLAVOR_RESOURCES})
    groups = {'': base}
    for key, value in sorted(flavor.extra_specs.items()):
        m = _SPEC_KEY.match(key)
        if not m:
            continue     # hw:, accel:, quota:, group_policy ...: not Placement's
        kind, suffix, name = m.groups()
        group = groups.setdefault(suffix, RequestGroup(suffix=suffix))
        try:
            if kind == 'resources':
                if not _NAME.match(name):
                    raise ValueError(f'{key}: {name!r} is not a resource class')
                group.resources[name] = _amount(value, key)
            else:
                _add_trait(group, name, value.strip(), key)
        except ValueError as err:
            raise exception.FlavorInvalid(reason=str(err)) from None
        if suffix.upper().startswith('_DEVICE_PROFILE_'):
            raise exception.FlavorInvalid(
                reason=f'{key}: suffix {suffix} is reserved for device-profile groups')
    return list(groups.values())


def _profile_groups(profile):
    name = profile.get('name')
    out = []
    for index, spec in enumerate(profile.get('groups') or []):
        group = RequestGroup(suffix=f'_DEVICE_PROFILE_{index}',
                             requester_id=f'device_profile_{index}',
                             required={OWNER_CYBORG})
        for key, value in spec.items():
            prefix, _, item = key.partition(':')
            try:
                if prefix == 'resources':
                    group.resources[item.strip()] = _amount(value, key)
                elif prefix == 'trait':
                    _add_trait(group, item.strip(), str(value).strip(), key)
                elif prefix != 'accel':
                    raise ValueError(f'unknown key {key!r}')
            except ValueError as err:
                raise exception.DeviceProfileUnusable(name=name, reason=str(err)) from None
        if OWNER_CYBORG in group.forbidden:
            raise exception.DeviceProfileUnusable(
                name=name, reason=f'group {index} forbids {OWNER_CYBORG}')
        out.append(group)
    if not out:
        raise exception.DeviceProfileUnusable(name=name, reason='it has no groups')
    return out


def build(flavor, profile=None, owner_nova_prefilter=True):
    """The ResourceRequest for ``flavor`` and its device ``profile`` (the dict
    ``GET /v2/device_profiles?name=`` returned, or None)."""
    groups = _flavor_groups(flavor)
    if owner_nova_prefilter:
        for g in groups:
            g.required.add(OWNER_NOVA)
            if g.suffix == '':
                g.forbidden.add(OWNER_CYBORG)
            if OWNER_NOVA in g.forbidden:
                raise exception.FlavorInvalid(
                    reason=f'group {g.suffix or "(unsuffixed)"} forbids {OWNER_NOVA}, '
                           f'which the OWNER_NOVA pre-filter requires')
    if profile is not None:
        groups += _profile_groups(profile)
    suffixed = [g for g in groups if g.suffix]
    policy = flavor.extra_specs.get('group_policy')
    if len(suffixed) > 1 and policy is None:
        raise exception.FlavorInvalid(
            reason=f'{len(suffixed)} suffixed request groups need a group_policy extra '
                   f'spec (none or isolate)')
    return ResourceRequest(groups=groups, group_policy=policy,
                           root_required={OWNER_NOVA} if owner_nova_prefilter else set(),
                           device_profile=profile.get('name') if profile else None)

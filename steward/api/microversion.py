"""Microversions of the accelerator API: the one canonical list.

Every microversion is one ``_add()`` line below, named after the feature it
introduced (so handlers read ``req.version >= microversion.DEVICE_STATUS``, never
a bare ``(2, 3)``), plus a paragraph in ``rest_api_version_history.rst``.

Adding a microversion: the checklist, worked through on 2.7, is
doc/contributor/microversions.md. The intersection tests
(tests/functional/api/test_microversion.py) fail if the list has a gap, goes
backwards or the history file misses a version.
"""
import logging

import microversion_parse

from steward.common import exception

LOG = logging.getLogger(__name__)

SERVICE_TYPE = 'accelerator'
HEADER = 'OpenStack-API-Version'
MIN_HEADER = 'OpenStack-API-Minimum-Version'
MAX_HEADER = 'OpenStack-API-Maximum-Version'

Version = microversion_parse.Version

VERSIONS = []
"""[(Version, feature description)], oldest first."""


def _add(version_string, description):
    version = microversion_parse.parse_version_string(version_string)
    if VERSIONS:
        last = VERSIONS[-1][0]
        # No gaps, no going backwards: each entry is the previous minor + 1.
        assert version == Version(last.major, last.minor + 1), version_string
    VERSIONS.append((version, description))
    return version


# The canonical version list -------------------------------------------------------
INITIAL = _add('2.0', 'Initial v2 API with microversions (Ussuri).')
ARQ_BIND_PROJECT_ID = _add('2.1', 'ARQ bind PATCH may carry /project_id (admin only).')
DP_GET_BY_NAME = _add('2.2', 'GET /v2/device_profiles/{name} looks a profile up by name.')
DEVICE_STATUS = _add('2.3', 'Devices show status (enabled|maintaining).')
PCI_MANAGED = _add('2.4', 'Bound PCI ARQs show attach_handle_info.managed (spec 4).')
DEVICE_STATE = _add('2.5', 'Devices show device_state; POST /v2/devices/{uuid}/clean, '
                           'GET .../clean_plan and .../erase_records (spec 1).')
DEVICE_HISTORY = _add('2.6', 'Devices show last_error, missing and missing_since; '
                             'GET /v2/devices/{uuid}/history.')
ARQ_MOVE = _add('2.7', 'Bound ARQs say how their device may move: '
                       'attach_handle_info.live_migratable, .cold_migratable and '
                       '.move_refusal.')
DEVICE_HEALTH = _add('2.8', 'Devices carry their health (state, conditions, when read, '
                            'the fault that keeps them out of service); GET /v2/devices '
                            'filters on ?health=.')
NUMA_NODE = _add('2.9', 'Devices show numa_node; bound PCI ARQs show '
                        'attach_handle_info.numa_node (issue 52: pools never span '
                        'NUMA nodes).')
# --- add new microversions above this line ----------------------------------------

MIN_VERSION = VERSIONS[0][0]
MAX_VERSION = VERSIONS[-1][0]
_KNOWN = frozenset(v for v, _ in VERSIONS)


def min_version_string():
    return str(MIN_VERSION)


def max_version_string():
    return str(MAX_VERSION)


def _requested(headers):
    """The version string the client asked for, or None. ``headers`` maps
    lower-case header names to values."""
    raw = headers.get('openstack-api-version')
    if raw is None:
        return None
    found = microversion_parse.get_version(headers, SERVICE_TYPE)
    if found is not None:
        return found
    # Legacy bare form ``OpenStack-API-Version: 2.3`` (no service type): upstream
    # still accepts it. A value naming another service (``compute 2.3``) is not
    # ours and is ignored, so the request is served at the minimum.
    for part in reversed(raw.split(',')):
        part = part.strip()
        if part and ' ' not in part:
            LOG.warning('Deprecated microversion header %r without the service '
                        'type; send "%s %s".', raw, SERVICE_TYPE, part)
            return part
    return None


def parse(headers):
    """The Version a request is served at. No header: the minimum (Nova sends
    none). ``latest``: the maximum. Junk, another major or a minor out of
    range: NotAcceptable (406)."""
    wanted = _requested(headers)
    if wanted is None:
        return MIN_VERSION
    if wanted.lower() == 'latest':
        return MAX_VERSION
    try:
        version = microversion_parse.parse_version_string(wanted)
    except TypeError:
        version = None
    if version not in _KNOWN:
        raise exception.NotAcceptable(version=wanted, min_version=str(MIN_VERSION),
                                      max_version=str(MAX_VERSION))
    return version


def require(version, feature, what):
    """Raise FeatureNotAvailable (406) unless ``version`` >= ``feature``."""
    if version < feature:
        raise exception.FeatureNotAvailable(feature=what, needed=str(feature),
                                            served=str(version))


def header_value(version):
    return f'{SERVICE_TYPE} {version}'

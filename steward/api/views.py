"""Representations: storage rows and conductor records -> API dicts.

Rows never leave the API unconverted; every field a client sees is chosen here,
per microversion. Links are built on ``req.base_url`` ([api] public_endpoint or
the request's URL root), so the ``self`` links really serve the API (upstream
hard-wired an ``/accelerator`` prefix).
"""
import json

from steward.api import microversion
from steward.common import health
from steward.common import moves
from steward.db import deployables as deployable_db
from steward.db import device_profiles as profile_db
from steward.db import devices as device_db
from steward.db import query as db_query


def _link(req, *parts, rel='self', versioned=True):
    prefix = f'{req.base_url}/v2' if versioned else req.base_url
    return {'href': '/'.join((prefix,) + parts), 'rel': rel}


def version_v2(req, trailing_slash):
    """The v2 version document (``GET /`` lists it, ``GET /v2`` is it)."""
    href = f'{req.base_url}/v2/' if trailing_slash else f'{req.base_url}/v2'
    return {'id': 'v2.0' if trailing_slash else 'v2', 'status': 'CURRENT',
            'max_version': microversion.max_version_string(),
            'min_version': microversion.min_version_string(),
            'links': [{'href': href, 'rel': 'self'}]}


def device(req, row):
    """``row``: a device (device_db.ROW)."""
    return devices(req, [device_db.device_record(row)])[0]


# A listing's rows rarely change between two listings, and building and encoding
# ten thousand dicts is most of a big listing's time: each row's JSON is kept,
# keyed by everything it is made of (the values of the whole record, the fields the
# microversion shows, the links' prefix), so a changed row is simply another key.
_ENCODED = {}
_MAX_ENCODED = 32768      # ~1.5 KiB each: 10 000 devices at two versions + deployables


def _encoded(key, build):
    text = _ENCODED.get(key)
    if text is None:
        if len(_ENCODED) >= _MAX_ENCODED:
            _ENCODED.clear()
        text = _ENCODED[key] = json.dumps(build())
    return text


def json_list(name, texts):
    """The bytes of ``{name: [...]}`` from its items' JSON, exactly as json.dumps
    writes the whole document."""
    return ('{"%s": [%s]}' % (name, ', '.join(texts))).encode()


def devices_json(req, rows):
    """``{"devices": [...]}`` as bytes, each row's JSON built once (see _ENCODED).
    ``rows``: device_db.device_records(), all with the same keys in one order."""
    flags = ('device', req.version >= microversion.DEVICE_STATUS,
             req.version >= microversion.DEVICE_STATE,
             req.version >= microversion.DEVICE_HISTORY,
             req.version >= microversion.DEVICE_HEALTH,
             req.version >= microversion.NUMA_NODE, req.base_url)
    return json_list('devices', [
        _encoded((flags, *row.values()), lambda row=row: devices(req, [row])[0])
        for row in rows])


def deployables_json(req, rows, attributes):
    """``{"deployables": [...]}`` as bytes (see devices_json); ``rows``:
    deployable_db.deployable_records()."""
    flags = ('deployable', req.base_url)
    return json_list('deployables', [
        _encoded((flags, tuple(attributes.get(row['id'], ())), *row.values()),
                 lambda row=row: deployables(req, [row], attributes)[0])
        for row in rows])


def devices(req, rows):
    """``rows``: device records (device_db.device_records, device_record). What
    depends on the request only (the microversion's fields, the links' prefix) is
    decided once, not per row: a listing may hold ten thousand."""
    status = req.version >= microversion.DEVICE_STATUS
    state = req.version >= microversion.DEVICE_STATE
    history = req.version >= microversion.DEVICE_HISTORY
    with_health = req.version >= microversion.DEVICE_HEALTH
    with_numa = req.version >= microversion.NUMA_NODE
    prefix = f'{req.base_url}/v2/devices/'
    ts = db_query.timestamp
    result = []
    for row in rows:
        out = {
            'uuid': row['uuid'], 'type': row['type'], 'vendor': row['vendor'],
            'model': row['model'], 'std_board_info': row['std_board_info'],
            'vendor_board_info': row['vendor_board_info'], 'hostname': row['hostname'],
        }
        if status:
            out['status'] = row['status']
        if state:
            out['device_state'] = row['device_state']
        if history:
            out['last_error'] = row['last_error']
            out['missing'] = row['missing_since'] is not None
            out['missing_since'] = ts(row['missing_since'])
        if with_health:
            out['health'] = _health(row)
        if with_numa:
            out['numa_node'] = numa_node(row['std_board_info'])
        out['created_at'] = ts(row['created_at'])
        out['updated_at'] = ts(row['updated_at'])
        out['links'] = [{'href': prefix + row['uuid'], 'rel': 'self'}]
        result.append(out)
    return result


def numa_node(board_text):
    """The NUMA node a device's driver read (std_board_info's ``numa_node``: the
    pci driver's, from sysfs), or None where it read none or the platform has no
    NUMA affinity (2.9)."""
    try:
        node = json.loads(board_text or '{}').get('numa_node')
    except (ValueError, AttributeError):
        return None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def _health(row):
    """A device's health at 2.8 (issue 38): the driver's last reading, and the
    fault that keeps it out of service until an operator brings it back."""
    try:
        conditions = json.loads(row['health_conditions'] or '[]')
    except ValueError:
        conditions = []
    return {'state': row['health'] or health.HEALTH_UNKNOWN,
            'conditions': conditions,
            'read_at': db_query.timestamp(row['health_read_at']),
            'fault': row['health_fault']}


def deployable(req, row, attributes):
    """``row``: a deployable (deployable_db.ROW); ``attributes``: its Attribute
    rows; ``attributes_list`` is a JSON *string* of one-key dicts, as upstream."""
    return deployables(req, [deployable_db.deployable_record(row)],
                       {row.id: [(a.key, a.value) for a in attributes]})[0]


def deployables(req, rows, attributes):
    """``rows``: deployable records (deployable_db.deployable_records,
    deployable_record); ``attributes``: {deployable id: [(key, value), ...]}
    (attribute_db.attribute_pairs_by_deployable)."""
    versioned = f'{req.base_url}/v2/deployables/'
    bookmark = f'{req.base_url}/deployables/'
    ts = db_query.timestamp
    dumps = json.dumps
    result = []
    for row in rows:
        result.append({
            'uuid': row['uuid'], 'parent_id': row['parent_id'], 'root_id': row['root_id'],
            'name': row['name'], 'num_accelerators': row['num_accelerators'],
            'device_id': row['device_id'],
            'attributes_list': dumps([{k: v} for k, v in attributes.get(row['id'], ())]),
            'rp_uuid': row['rp_uuid'], 'driver_name': row['driver_name'],
            'bitstream_id': row['bitstream_id'],
            'created_at': ts(row['created_at']),
            'updated_at': ts(row['updated_at']),
            'links': [{'href': versioned + row['uuid'], 'rel': 'self'},
                      {'href': bookmark + row['uuid'], 'rel': 'bookmark'}],
        })
    return result


def attribute(req, row):
    return {
        'uuid': row.uuid, 'deployable_id': row.deployable_id, 'key': row.key,
        'value': row.value, 'created_at': db_query.timestamp(row.created_at),
        'updated_at': db_query.timestamp(row.updated_at),
        'links': [_link(req, 'attributes', row.uuid)],
    }


def device_profile(req, row):
    """``row``: a profile (profile_db.ROW)."""
    return device_profiles(req, [profile_db.device_profile_record(row)])[0]


def device_profiles(req, rows):
    """``rows``: profile records (profile_db.device_profile_records,
    device_profile_record)."""
    return [_device_profile(req, row) for row in rows]


def _device_profile(req, row):
    # NOTE(steward): upstream's get_one printed timestamps with str() ("... +00:00"
    # with a space) and its list with ISO "T"; every view here uses ISO 8601.
    return {
        'uuid': row['uuid'], 'name': row['name'], 'description': row['description'],
        'groups': profile_db.device_profile_groups(row),
        'created_at': db_query.timestamp(row['created_at']),
        'updated_at': db_query.timestamp(row['updated_at']),
        'links': [_link(req, 'device_profiles', row['uuid'])],
    }


ARQ_FIELDS = ('uuid', 'state', 'device_profile_name', 'device_profile_group_id',
              'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
              'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info',
              'created_at', 'updated_at')


def arq(req, record):
    """``record``: ``arq_db.arq_record()`` output (also what the conductor returns).
    Only the wire fields are copied: a key added to records for internal use
    does not leak."""
    out = {k: record.get(k) for k in ARQ_FIELDS}
    out['attach_handle_info'] = _attach_handle_info(req, record)
    out['links'] = [_link(req, 'accelerator_requests', record['uuid'])]
    return out


def _attach_handle_info(req, record):
    stored = record.get('attach_handle_info') or {}
    info = dict(stored)
    managed = info.pop('managed', None)
    # Stored by the pci/mdev drivers only when tagged; the wire's form is 2.7's.
    info.pop(moves.LIVE_KEY, None)
    numa = info.pop('numa_node', None)
    handle_type = record.get('attach_handle_type')
    if handle_type == 'PCI' and req.version >= microversion.NUMA_NODE:
        # Stored by the pci driver from sysfs (issue 52); None where the
        # platform gives none, or on a handle discovered before 2.9.
        info['numa_node'] = numa
    if handle_type == 'PCI' and req.version >= microversion.PCI_MANAGED:
        # Stored by the pci driver from device_spec's ``managed`` tag; handles
        # discovered before it existed have none and mean libvirt-managed.
        info['managed'] = True if managed is None else managed is True
    if handle_type and req.version >= microversion.ARQ_MOVE:
        # Every Bound ARQ, whatever its handle type: Nova refuses a move of an
        # instance whose ARQs lack these keys (an older Steward or Cyborg).
        info.update(moves.facts(handle_type, stored, record.get('device_type')))
    return info


def device_history(req, record):
    """``record``: ``history_db.device_history_record()`` output (2.6)."""
    return {k: record[k] for k in HISTORY_FIELDS}


HISTORY_FIELDS = ('uuid', 'created_at', 'event', 'source_state', 'target_state',
                  'reason', 'request_id', 'actor')


def erase_record(req, record):
    """``record``: ``erase_db.erase_record_record()`` output (2.5)."""
    out = dict(record)
    # what Identify advertised, the action chosen and why (issue 21); None on
    # records written before it was kept
    out.setdefault('capability_decision', None)
    out['links'] = [_link(req, 'devices', record['device_uuid'], 'erase_records')]
    return out

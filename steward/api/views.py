"""Representations: storage rows and conductor records -> API dicts.

Rows never leave the API unconverted; every field a client sees is chosen here,
per microversion. Links are built on ``req.base_url`` ([api] public_endpoint or
the request's URL root), so the ``self`` links really serve the API (upstream
hard-wired an ``/accelerator`` prefix).
"""
import json

from steward.api import microversion
from steward.db import api as db


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
    out = {
        'uuid': row.uuid, 'type': row.type, 'vendor': row.vendor, 'model': row.model,
        'std_board_info': row.std_board_info,
        'vendor_board_info': row.vendor_board_info, 'hostname': row.hostname,
    }
    if req.version >= microversion.DEVICE_STATUS:
        out['status'] = row.status
    if req.version >= microversion.DEVICE_STATE:
        out['device_state'] = row.device_state
    if req.version >= microversion.DEVICE_HISTORY:
        out['last_error'] = row.last_error
        out['missing'] = row.missing_since is not None
        out['missing_since'] = db.timestamp(row.missing_since)
    out['created_at'] = db.timestamp(row.created_at)
    out['updated_at'] = db.timestamp(row.updated_at)
    out['links'] = [_link(req, 'devices', row.uuid)]
    return out


def deployable(req, row, attributes):
    """``attributes``: the deployable's Attribute rows; ``attributes_list`` is a
    JSON *string* of one-key dicts, as upstream."""
    return {
        'uuid': row.uuid, 'parent_id': row.parent_id, 'root_id': row.root_id,
        'name': row.name, 'num_accelerators': row.num_accelerators,
        'device_id': row.device_id,
        'attributes_list': json.dumps([{a.key: a.value} for a in attributes]),
        'rp_uuid': row.rp_uuid, 'driver_name': row.driver_name,
        'bitstream_id': row.bitstream_id,
        'created_at': db.timestamp(row.created_at),
        'updated_at': db.timestamp(row.updated_at),
        'links': [_link(req, 'deployables', row.uuid),
                  _link(req, 'deployables', row.uuid, rel='bookmark', versioned=False)],
    }


def attribute(req, row):
    return {
        'uuid': row.uuid, 'deployable_id': row.deployable_id, 'key': row.key,
        'value': row.value, 'created_at': db.timestamp(row.created_at),
        'updated_at': db.timestamp(row.updated_at),
        'links': [_link(req, 'attributes', row.uuid)],
    }


def device_profile(req, row):
    # NOTE(steward): upstream's get_one printed timestamps with str() ("... +00:00"
    # with a space) and its list with ISO "T"; every view here uses ISO 8601.
    return {
        'uuid': row.uuid, 'name': row.name, 'description': row.description,
        'groups': db.device_profile_groups(row),
        'created_at': db.timestamp(row.created_at),
        'updated_at': db.timestamp(row.updated_at),
        'links': [_link(req, 'device_profiles', row.uuid)],
    }


ARQ_FIELDS = ('uuid', 'state', 'device_profile_name', 'device_profile_group_id',
              'hostname', 'device_rp_uuid', 'instance_uuid', 'project_id',
              'attach_handle_type', 'attach_handle_uuid', 'attach_handle_info',
              'created_at', 'updated_at')


def arq(req, record):
    """``record``: ``db.arq_record()`` output (also what the conductor returns).
    Only the wire fields are copied: a key added to records for internal use
    does not leak."""
    out = {k: record.get(k) for k in ARQ_FIELDS}
    out['attach_handle_info'] = _attach_handle_info(req, record)
    out['links'] = [_link(req, 'accelerator_requests', record['uuid'])]
    return out


def _attach_handle_info(req, record):
    info = dict(record.get('attach_handle_info') or {})
    managed = info.pop('managed', None)
    if record.get('attach_handle_type') == 'PCI' and req.version >= microversion.PCI_MANAGED:
        # Stored by the pci driver from device_spec's ``managed`` tag; handles
        # discovered before it existed have none and mean libvirt-managed.
        info['managed'] = True if managed is None else managed is True
    return info


def device_history(req, record):
    """``record``: ``db.device_history_record()`` output (2.6)."""
    return {k: record[k] for k in HISTORY_FIELDS}


HISTORY_FIELDS = ('uuid', 'created_at', 'event', 'source_state', 'target_state',
                  'reason', 'request_id', 'actor')


def erase_record(req, record):
    """``record``: ``db.erase_record_record()`` output (2.5)."""
    out = dict(record)
    out['links'] = [_link(req, 'devices', record['device_uuid'], 'erase_records')]
    return out

"""Which stored device a reported one is: by identity (what survives a new PCI
address: an NVMe drive's serial number and subsystem NQN), else by control-path id
(its PCI address). See report/diff.py for what happens to the rows."""
import collections
import json


def canonical(info):
    try:
        return json.dumps(json.loads(info), sort_keys=True)
    except (TypeError, ValueError):
        return info


def _vendor(text):
    try:
        vendor = json.loads(text or '{}')
    except (TypeError, ValueError):
        return {}
    return vendor if isinstance(vendor, dict) else {}


def identity_of(rep):
    """What identifies the reported device wherever it is plugged in, or None (its
    control-path id, i.e. its PCI address, is then all there is)."""
    if rep.type != 'NVME':
        return None
    vendor = _vendor(rep.vendor_board_info)
    serial, nqn = vendor.get('serial'), vendor.get('subsysnqn')
    if not (isinstance(serial, str) and isinstance(nqn, str)):
        return None
    serial, nqn = serial.strip(), nqn.strip()
    return f'nvme:{serial}:{nqn}'[:255] if serial and nqn else None


def match_devices(existing, cpid_of, reported):
    """[(reported device, stored Device or None, its identity)]: by identity
    first, wherever it is now; else by control-path id among rows whose identity
    is unknown or the same (a different drive swapped into the slot is a new
    device). A report without an identity cannot prove it is another drive: it
    takes the row at its address, the one last seen there first."""
    by_identity = {d.identity: d for d in existing if d.identity}
    by_cpid = collections.defaultdict(list)
    for d in sorted(existing, key=lambda d: d.missing_since is not None):
        if d.id in cpid_of:
            by_cpid[canonical(cpid_of[d.id].cpid_info)].append(d)
    idents = [identity_of(rep) for rep in reported]
    taken, found = set(), {}
    for i, ident in enumerate(idents):
        device = by_identity.get(ident) if ident else None
        if device is not None and device.id not in taken:
            found[i] = device
            taken.add(device.id)
    for i, rep in enumerate(reported):
        if i in found:
            continue
        for device in by_cpid.get(canonical(rep.controlpath_id.cpid_info), ()):
            if device.id not in taken and (idents[i] is None or
                                           device.identity in (None, idents[i])):
                found[i] = device
                taken.add(device.id)
                break
    return [(rep, found.get(i), idents[i]) for i, rep in enumerate(reported)]

"""How Cyborg's rows become Steward's: attach infos in the form Steward's drivers
discover them, the fake driver's handles paired with what it reports, and the
devices Steward keeps as inventory without offering them (no driver for them).
"""
import json

# Cyborg driver names Steward has no driver for: their devices are kept, not offered.
# Every FPGA but the fake one is too (intel, XILINX, INSPUR: bitstream programming);
# their driver names say less than their type (Intel's NIC and QAT drivers are
# "intel" as well).
UNSUPPORTED_DRIVERS = {'spdk': 'SPDK'}


_PCI_KEYS = {'domain': 4, 'bus': 2, 'device': 2, 'function': 1}


def normalized_info(text):
    """A PCI attach info or control-path id in Steward's form (hex, zero-padded,
    keys sorted; other keys such as ``physical_network`` kept), or None when it is
    not one."""
    try:
        info = json.loads(text)
        out = dict(info)
        for key, width in _PCI_KEYS.items():
            out[key] = '%0*x' % (width, int(str(info[key]), 16))
    except (TypeError, ValueError, KeyError):
        return None
    return json.dumps(out, sort_keys=True)


# Keys of upstream attach infos Steward's drivers do not report: upstream's NVIDIA
# vGPU driver numbers each mdev handle (``vgpu_mark: <type>_<n>``); Steward's mdev
# handles of one type are all alike (steward/drivers/mdev/driver.py).
UPSTREAM_ONLY_KEYS = {'MDEV': ('vgpu_mark',)}


def steward_form(handle):
    """The attach info a driver of Steward's reports for an upstream handle."""
    text = normalized_info(handle['attach_info']) or handle['attach_info']
    drop = UPSTREAM_ONLY_KEYS.get(handle['attach_type'], ())
    if not drop:
        return text
    try:
        info = json.loads(text)
    except ValueError:
        return text
    return json.dumps({k: v for k, v in info.items() if k not in drop}, sort_keys=True)


def address_order(text):
    info = json.loads(normalized_info(text) or '{}')
    return tuple(int(info.get(k, '0'), 16) for k in _PCI_KEYS)


def fake_driver_infos(devices, cpid_text, dep_name):
    """The attach infos ``devices`` (what Steward's fake driver reports on a host)
    give ``dep_name``, in address order; None when they hold no such deployable."""
    for dev in devices:
        if normalized_info(dev.controlpath_id.cpid_info) != normalized_info(cpid_text):
            continue
        for dep in dev.deployable_list:
            if dep.name == dep_name:
                return sorted((normalized_info(h.attach_info)
                               for h in dep.attach_handle_list), key=address_order)
    return None


def unsupported_reason(device, deployable):
    """Why Steward has no driver for this Cyborg deployable, or None."""
    driver = (deployable.get('driver_name') or '').lower()
    if driver in UNSUPPORTED_DRIVERS:
        return f'{UNSUPPORTED_DRIVERS[driver]} driver'
    if deployable.get('bitstream_id'):
        return f'FPGA programmed with bitstream {deployable["bitstream_id"]}'
    if device['type'] == 'FPGA' and driver != 'fake':
        return f'FPGA driver {deployable.get("driver_name")!r} (bitstream programming)'
    return None

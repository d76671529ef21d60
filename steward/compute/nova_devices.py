"""Spec 5's check while composing the XML: a device an ARQ hands over (a PCI
function, or an mdev's PCI parent) that Nova's own ``[pci] device_spec`` also
lists gets a warning. Nova and Steward would both report it to Placement and may
hand it to two guests; the operator must give it to one of them.

Nova's entries are ``[compute] nova_pci_device_spec`` (same JSON as Nova's) and are
matched the way Nova matches them (steward.drivers.pci.device_spec). Vendor and product
ids come from sysfs (``[DEFAULT] sysfs_root``); a device sysfs does not show is
matched on its address only.
"""
import logging

from steward.compute import handles
from steward.drivers.pci import device_spec
from steward.drivers.pci import sysfs as pci_sysfs

LOG = logging.getLogger(__name__)

OPTION = '[compute] nova_pci_device_spec'


def _device(sysfs_root, address):
    dev = pci_sysfs.read_device(sysfs_root, str(address))
    if dev is None:
        dev = pci_sysfs.PciDevice(
            address=address, vendor_id=None, product_id=None, class_code='000000',
            driver=None, physfn=None, virtfns=[], path='')
    return dev


def _addresses(arqs):
    by_type, _ = handles.split_by_type(arqs)
    for arq in by_type[handles.PCI]:
        yield arq, handles.pci_address(arq)
    for arq in by_type[handles.MDEV]:
        mdev = handles.mdev(arq)
        if mdev.pci is not None:
            yield arq, mdev.pci


def check(arqs, spec_values, sysfs_root, instance_uuid=None):
    """Warn for every ARQ device Nova's device_spec also matches; returns
    [(arq uuid, address, entry)] of those."""
    specs = device_spec.parse_all(spec_values, OPTION)
    if not specs:
        return []
    found = []
    for arq, address in _addresses(arqs):
        spec = device_spec.first_match(specs, _device(sysfs_root, address), sysfs_root)
        if spec is None:
            continue
        LOG.warning('Device %s of accelerator request %s (instance %s) is also in '
                    "Nova's PCI device_spec (%s): a device must be used by Nova or by "
                    'Cyborg/Steward, never by both; fix the configuration.',
                    address, handles.arq_uuid(arq), instance_uuid, spec.raw)
        found.append((handles.arq_uuid(arq), str(address), spec.raw))
    return found

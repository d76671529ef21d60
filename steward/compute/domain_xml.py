"""libvirt domain XML for an instance's accelerators, built with lxml.

* PCI ARQ -> ``<hostdev mode='subsystem' type='pci' managed='yes|no'>`` with
  ``<driver name='vfio'/>`` and the source address; ``managed`` from
  attach_handle_info.managed (spec 4; absent -> yes).
* MDEV ARQ -> ``<hostdev mode='subsystem' type='mdev' model='vfio-pci'>`` whose
  source is the mdev's UUID (= attach_handle_uuid; the mdev must exist first,
  see ``steward.compute.mdev``).
* Any other attach_handle_type (the fake driver's TEST_PCI) is ignored with one
  log line naming the types, as Nova's libvirt driver does (spec 5).

The document around the hostdevs is the smallest one libvirt accepts (name, uuid,
memory, vcpu, os type): disks, NICs and consoles are the virt driver's business.
mdev hostdevs come first, then PCI ones, in ARQ order, as in Nova.
"""
import logging
import os

from lxml import etree

from steward.compute import handles

LOG = logging.getLogger(__name__)

# libvirt's names for os.uname().machine values that differ.
_ARCH = {'amd64': 'x86_64', 'arm64': 'aarch64'}


def pci_hostdev(arq):
    address = handles.pci_address(arq)
    hostdev = etree.Element('hostdev', mode='subsystem', type='pci',
                            managed='yes' if handles.managed(arq) else 'no')
    etree.SubElement(hostdev, 'driver', name='vfio')
    source = etree.SubElement(hostdev, 'source')
    etree.SubElement(source, 'address', domain=f'0x{address.domain}',
                     bus=f'0x{address.bus}', slot=f'0x{address.slot}',
                     function=f'0x{address.function}')
    return hostdev


def mdev_hostdev(arq):
    mdev = handles.mdev(arq)
    hostdev = etree.Element('hostdev', mode='subsystem', type='mdev', model='vfio-pci')
    source = etree.SubElement(hostdev, 'source')
    etree.SubElement(source, 'address', uuid=mdev.uuid)
    return hostdev


def hostdevs(arqs, instance_uuid=None):
    """The hostdev elements for ``arqs`` (bound ARQ dicts)."""
    by_type, unsupported = handles.split_by_type(arqs)
    if unsupported:
        LOG.info('Ignoring accelerator requests for instance %s. Supported attach '
                 'handle types: %s. But got these unsupported types: %s.',
                 instance_uuid, ', '.join(handles.SUPPORTED),
                 ', '.join(sorted(unsupported)))
    return ([mdev_hostdev(a) for a in by_type[handles.MDEV]]
            + [pci_hostdev(a) for a in by_type[handles.PCI]])


def host_arch():
    machine = os.uname().machine
    return _ARCH.get(machine, machine)


def domain(name, uuid, vcpus, memory_mb, arqs, domain_type='kvm', arch=None):
    """The whole ``<domain>`` element."""
    root = etree.Element('domain', type=domain_type)
    etree.SubElement(root, 'name').text = name
    etree.SubElement(root, 'uuid').text = uuid
    etree.SubElement(root, 'memory', unit='MiB').text = str(memory_mb)
    etree.SubElement(root, 'vcpu').text = str(vcpus)
    os_el = etree.SubElement(root, 'os')
    etree.SubElement(os_el, 'type', arch=arch or host_arch()).text = 'hvm'
    devices = etree.SubElement(root, 'devices')
    for hostdev in hostdevs(arqs, uuid):
        devices.append(hostdev)
    return root


def to_string(element):
    return etree.tostring(element, pretty_print=True, encoding='unicode')

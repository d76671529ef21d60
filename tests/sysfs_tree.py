"""Fake sysfs trees in the kernel's layout, for driver tests."""
import os


def make_pci(root, bdf, vendor, product, cls='0x120000', physfn=None, driver=None):
    devices = root / 'devices' / 'pci0000:00'
    path = devices / bdf
    path.mkdir(parents=True, exist_ok=True)
    for name, value in (('vendor', vendor), ('device', product), ('class', cls)):
        (path / name).write_text(value + '\n')
    bus = root / 'bus' / 'pci' / 'devices'
    bus.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(path, bus), bus / bdf)
    if physfn:
        os.symlink(f'../{physfn}', path / 'physfn')
        n = len([p for p in os.listdir(devices / physfn) if p.startswith('virtfn')])
        os.symlink(f'../{bdf}', devices / physfn / f'virtfn{n}')
    if driver:
        drv = root / 'bus' / 'pci' / 'drivers' / driver
        drv.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(drv, path), path / 'driver')
    return path


def make_sriov(root, pf, vendor, pf_product, vfs, vf_product=None, vf_driver=None,
               cls='0x120000'):
    """A PF with ``vfs`` (list of BDFs) enabled: sriov_* files, physfn/virtfnN links."""
    path = make_pci(root, pf, vendor, pf_product, cls=cls)
    (path / 'sriov_totalvfs').write_text(f'{max(len(vfs), 1) * 2}\n')
    (path / 'sriov_numvfs').write_text(f'{len(vfs)}\n')
    for vf in vfs:
        make_pci(root, vf, vendor, vf_product or pf_product, cls=cls, physfn=pf,
                 driver=vf_driver)
    return path


def make_netdev(root, name, bdf):
    """/sys/class/net/<name>/device -> the PCI function, for devname matching."""
    net = root / 'class' / 'net' / name
    net.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(root / 'devices' / 'pci0000:00' / bdf, net), net / 'device')
    return net

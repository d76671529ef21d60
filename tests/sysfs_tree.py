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

"""The drivers build on one another in one direction only.

``steward/drivers`` holds what every driver shares (the ``Driver`` contract, the
objects a driver reports, a cleanup's job, the names of pools) and one package or
module per driver.
PCI functions are what the others are made of: the NVMe driver matches controllers
with ``[nvme] device_spec`` and reads them from PCI sysfs, the mdev driver's parents
are PCI functions, the NVIDIA GPU driver offers mdevs. So ``pci`` imports no other
driver, and a driver imports only those below it here: a change to the NVMe driver
can then never break the PCI or mdev driver. The module graph is
tests/unit/structure/test_import_cycles.py's."""
from tests.unit.structure.test_import_cycles import import_graph

SHARED = {'base', 'objects', 'cleanup_job', 'pools'}
# driver: (the drivers it may import, why).
BELOW = {
    'fake': (set(), 'the driver of the tests and of a dry run stands alone'),
    'pci': (set(), 'PCI functions: device_spec matching and sysfs, which the others '
                   'build on'),
    'mdev': ({'pci'}, 'an mdev parent is a PCI function; its device_spec tags are '
                      "the PCI driver's"),
    'nvme': ({'pci'}, 'an NVMe controller is a PCI function'),
    'nvidia_gpu': ({'mdev', 'pci'}, "a GPU's vGPU types are mdev types"),
}


def driver_of(module):
    """'nvme' for steward.drivers.nvme.cli, None outside steward.drivers or for the
    package itself."""
    parts = module.split('.')
    if parts[:2] != ['steward', 'drivers'] or len(parts) < 3:
        return None
    return parts[2]


def violations(graph):
    found = []
    for module in sorted(graph):
        mine = driver_of(module)
        if mine is None:
            continue
        if mine not in SHARED and mine not in BELOW:
            found.append(f'{module}: neither shared nor a driver of BELOW')
            continue
        allowed = SHARED | {mine} | (BELOW[mine][0] if mine in BELOW else set())
        for target in sorted(graph[module]):
            theirs = driver_of(target)
            if theirs is not None and theirs not in allowed:
                why = BELOW[mine][1] if mine in BELOW else 'shared by every driver'
                found.append(f'{module} -> {target} ({mine}: {why})')
    return found


def test_an_import_upward_or_an_unknown_driver_is_found():
    graph = {'steward.drivers.pci.driver': {'steward.drivers.nvme.cli',
                                            'steward.drivers.base'},
             'steward.drivers.nvme.cli': {'steward.drivers.pci.sysfs'},
             'steward.drivers.pci.sysfs': set(),
             'steward.drivers.base': {'steward.drivers.mdev.bus'},
             'steward.drivers.mdev.bus': set(),
             'steward.drivers.toy.driver': {'steward.drivers.base'}}
    assert violations(graph) == [
        'steward.drivers.base -> steward.drivers.mdev.bus (base: shared by every driver)',
        'steward.drivers.pci.driver -> steward.drivers.nvme.cli (pci: PCI functions: '
        'device_spec matching and sysfs, which the others build on)',
        'steward.drivers.toy.driver: neither shared nor a driver of BELOW']


def test_drivers_import_only_the_drivers_below_them():
    found = violations(import_graph())
    assert not found, 'drivers importing upward in steward/drivers:\n' + '\n'.join(found)


def test_every_driver_of_below_exists():
    present = {driver_of(m) for m in import_graph()} - {None}
    assert set(BELOW) | SHARED == present, present ^ (set(BELOW) | SHARED)

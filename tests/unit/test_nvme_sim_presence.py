"""Simulated controllers that vanish and come back: the nvme driver letting go of the
function (vfio-pci takes it for passthrough), surprise removal and re-plug at another
address. Checked through sysfs in the kernel's layout, the real nvme-cli and the
production sysfs readers."""
import os
import signal
import subprocess
import sys
import time

import pytest

from steward.drivers.nvme import sysfs as nvme_sysfs
from steward.drivers.pci import sysfs as pci_sysfs
from tests.nvme_sim import SimError, Simulation
from tests.unit.test_nvme_sim import MiB, js, ok

NEEDLE = b'STILL-MINE' * 50
OLD, NEW = '0000:0a:00.0', '0000:3b:00.0'


@pytest.fixture
def sim(tmp_path):
    with Simulation(tmp_path) as s:
        yield s


def poll(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.01)
    return value


def gone(sim, path):
    r = sim.nvme('id-ctrl', path)
    assert r.returncode != 0 and 'No such file or directory' in r.stderr, r
    return r


def sys_path(sim, *parts):
    return os.path.join(sim.sysfs_root, *parts)


def identity(sim, ctrl):
    ic = js(sim, 'id-ctrl', ctrl.char_path)
    return ic['sn'].strip(), ic['mn'].strip(), ic['subnqn']


def assert_bound_at(sim, ctrl, address):
    """The kernel's layout for an nvme-bound function at `address`."""
    dev = pci_sysfs.read_device(sim.sysfs_root, address)
    assert (dev.vendor_id, dev.product_id, dev.class_code, dev.driver) == \
        ('8086', '0a54', '010802', 'nvme')
    pci = os.path.realpath(sys_path(sim, 'bus/pci/devices', address))
    assert pci == os.path.realpath(sys_path(sim, 'devices/pci0000:00', address))
    assert os.path.realpath(sys_path(sim, 'bus/pci/drivers/nvme', address)) == pci
    cdir = os.path.join(pci, 'nvme', ctrl.name)
    assert os.path.realpath(sys_path(sim, 'class/nvme', ctrl.name)) == cdir
    assert open(os.path.join(cdir, 'address')).read() == f'{address}\n'
    assert os.path.realpath(os.path.join(cdir, 'device')) == pci
    ref = nvme_sysfs.controller_for(sim.sysfs_root, sim.dev_root, address)
    assert ref is not None and ref.name == ctrl.name
    for ns in ctrl.namespaces():
        if ns['attached']:
            disk = f'{ctrl.name}n{ns["nsid"]}'
            assert os.path.realpath(sys_path(sim, 'class/block', disk)) == \
                os.path.join(cdir, disk)
            assert os.path.realpath(ns['node']) == ns['backing']
    subsys = sys_path(sim, 'class/nvme-subsystem', f'nvme-subsys{ctrl.index}')
    assert open(os.path.join(subsys, 'subsysnqn')).read().strip() == \
        f'nqn.2024-01.org.steward.nvme-sim:{ctrl_serial(sim, ctrl)}'


def ctrl_serial(sim, ctrl):
    return open(sys_path(sim, 'class/nvme', ctrl.name, 'serial')).read().strip()


def assert_no_nvme_side(sim, ctrl, address):
    assert not os.path.lexists(sys_path(sim, 'devices/pci0000:00', address, 'nvme'))
    assert not os.path.lexists(sys_path(sim, 'bus/pci/drivers/nvme', address))
    for entry in ('class/nvme/nvme0', 'class/nvme-subsystem/nvme-subsys0',
                  'devices/virtual/nvme-subsystem/nvme-subsys0'):
        assert not os.path.lexists(sys_path(sim, entry)), entry
    assert [e for e in os.listdir(sys_path(sim, 'class/block')) if e.startswith('nvme0')] == []
    assert [e for e in os.listdir(sim.dev_root) if e.startswith('nvme0')] == []
    assert ctrl.namespace_paths() == []
    assert nvme_sysfs.controller_for(sim.sysfs_root, sim.dev_root, address) is None
    gone(sim, ctrl.char_path)


def test_unbind_hands_the_function_to_vfio_and_bind_brings_it_back(sim):
    ctrl = sim.add_controller(address=OLD, namespaces=[2 * MiB, MiB], serial='SN-BIND')
    ctrl.write(4096, NEEDLE)
    ok(sim, 'detach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    before = identity(sim, ctrl)
    node = ctrl.namespace_paths()[0]
    ctrl.unbind()
    assert ctrl.presence == 'unbound'
    dev = pci_sysfs.read_device(sim.sysfs_root, OLD)            # the function stays
    assert (dev.driver, dev.class_code) == ('vfio-pci', '010802')
    assert os.path.realpath(sys_path(sim, 'bus/pci/drivers/vfio-pci', OLD)) == \
        os.path.realpath(dev.path)
    assert open(os.path.join(dev.path, 'driver_override')).read() == 'vfio-pci\n'
    assert_no_nvme_side(sim, ctrl, OLD)
    gone(sim, node)
    assert ctrl.find_on_media(NEEDLE) == [(ctrl.namespaces()[0]['backing'], 4096)]
    with pytest.raises(SimError, match='not bound'):
        ctrl.unbind()
    ctrl.bind()
    assert ctrl.presence == 'bound'
    assert identity(sim, ctrl) == before == ('SN-BIND', 'Sim NVMe',
                                             'nqn.2024-01.org.steward.nvme-sim:SN-BIND')
    assert_bound_at(sim, ctrl, OLD)
    assert not os.path.lexists(sys_path(sim, 'bus/pci/drivers/vfio-pci', OLD))
    assert ctrl.namespace_paths() == [node]                     # ns 2 is still detached
    with open(node, 'rb') as f:
        f.seek(4096)
        assert f.read(len(NEEDLE)) == NEEDLE
    assert js(sim, 'list-ns', ctrl.char_path, '-a') == {'nsid_list': [{'nsid': 1}, {'nsid': 2}]}
    with pytest.raises(SimError, match='not unbound'):
        ctrl.bind()


def test_descriptor_open_across_unbind_gets_enodev(sim):
    ctrl = sim.add_controller(namespaces=[MiB])
    node = ctrl.namespace_paths()[0]
    holder = ('import errno, fcntl, os, sys\n'
              'fd = os.open(sys.argv[1], os.O_RDONLY)\n'
              'NVME_IOCTL_ID = 0x4e40\n'
              'print(fcntl.ioctl(fd, NVME_IOCTL_ID), flush=True)\n'
              'sys.stdin.readline()\n'
              'try:\n'
              '    fcntl.ioctl(fd, NVME_IOCTL_ID)\n'
              '    print("answered", flush=True)\n'
              'except OSError as e:\n'
              '    print(errno.errorcode[e.errno], flush=True)\n')
    proc = subprocess.Popen([sys.executable, '-c', holder, node], env=sim.environ(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == '1'            # nsid 1 while bound
        ctrl.unbind()
        out, _ = proc.communicate('\n', timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.strip() == 'ENODEV'


def test_unplug_and_replug_at_another_address(sim):
    other = sim.add_controller(address='0000:0b:00.0', serial='SN-OTHER')
    ctrl = sim.add_controller(address=OLD, namespaces=[2 * MiB], capacity=3 * MiB,
                              serial='SN-MOVE', block_size=4096)
    assert ctrl.name == 'nvme1'
    ctrl.write(0, NEEDLE)
    ctrl.write_free(512, NEEDLE)
    before = identity(sim, ctrl)
    media = ctrl.find_on_media(NEEDLE)
    ctrl.unplug()
    assert ctrl.presence == 'unplugged'
    for entry in (f'devices/pci0000:00/{OLD}', f'bus/pci/devices/{OLD}',
                  f'bus/pci/drivers/nvme/{OLD}', 'class/nvme/nvme1', 'class/block/nvme1n1',
                  'class/nvme-subsystem/nvme-subsys1'):
        assert not os.path.lexists(sys_path(sim, entry)), entry
    assert [d.address for d in pci_sysfs.list_devices(sim.sysfs_root)] == \
        [pci_sysfs.PciAddress.parse('0000:0b:00.0')]
    gone(sim, ctrl.char_path)
    gone(sim, os.path.join(sim.dev_root, 'nvme1n1'))
    assert identity(sim, other)[0] == 'SN-OTHER'                # the neighbour is untouched
    with pytest.raises(SimError, match='already unplugged'):
        ctrl.unplug()
    with pytest.raises(SimError, match='not unbound'):
        ctrl.bind()
    with pytest.raises(SimError, match='already sits'):
        ctrl.replug('0000:0b:00.0')
    ctrl.replug(NEW)
    assert (ctrl.address, ctrl.presence, ctrl.name) == (NEW, 'bound', 'nvme1')
    assert ctrl._config()['sysfs_rel'] == f'devices/pci0000:00/{NEW}/nvme/nvme1'
    assert not os.path.lexists(sys_path(sim, 'devices/pci0000:00', OLD))
    assert not os.path.lexists(sys_path(sim, 'bus/pci/devices', OLD))
    assert_bound_at(sim, ctrl, NEW)
    assert identity(sim, ctrl) == before
    assert ctrl.find_on_media(NEEDLE) == media
    node = ctrl.namespace_paths()[0]
    ns_sysfs = os.path.realpath(sys_path(sim, 'class/block/nvme1n1'))
    assert ns_sysfs.startswith(os.path.realpath(sys_path(sim, 'devices/pci0000:00', NEW)))
    assert open(os.path.join(ns_sysfs, 'queue/logical_block_size')).read() == '4096\n'
    assert js(sim, 'id-ns', node)['nsze'] == 2 * MiB // 4096
    # namespace management on the re-plugged controller renders under the new address
    ok(sim, 'create-ns', ctrl.char_path, '-s', 256, '-c', 256, '-b', '4096')
    ok(sim, 'attach-ns', ctrl.char_path, '-n', '2', '-c', '0')
    assert os.path.isdir(sys_path(sim, 'devices/pci0000:00', NEW, 'nvme/nvme1/nvme1n2'))
    assert ctrl.read(512, len(NEEDLE), nsid=2) == NEEDLE       # the free bytes it mapped
    with pytest.raises(SimError, match='not unplugged'):
        ctrl.replug()


def test_unplug_from_unbound_and_replug_in_place(sim):
    ctrl = sim.add_controller(address=OLD, serial='SN-SAME')
    ctrl.unbind()
    ctrl.unplug()
    for entry in (f'devices/pci0000:00/{OLD}', f'bus/pci/drivers/vfio-pci/{OLD}'):
        assert not os.path.lexists(sys_path(sim, entry)), entry
    ctrl.replug()
    assert ctrl.address == OLD
    assert_bound_at(sim, ctrl, OLD)
    assert identity(sim, ctrl)[0] == 'SN-SAME'


@pytest.mark.parametrize('away', ['unbind', 'unplug'])
def test_sanitize_in_progress_survives(sim, away):
    ctrl = sim.add_controller(address=OLD, namespaces=[4 * MiB], capacity=6 * MiB,
                              sanitize_seconds=0.6)
    ctrl.write(0, NEEDLE)
    ctrl.write_free(0, NEEDLE)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    getattr(ctrl, away)()
    # the drive keeps sanitizing while the host cannot see it
    assert ctrl.sanitize_state()['in_progress']
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.find_on_media(NEEDLE) == []
    ctrl.bind() if away == 'unbind' else ctrl.replug(NEW)
    log = js(sim, 'sanitize-log', ctrl.char_path)[ctrl.name]
    assert log['sstat']['status'] == '(1) Most Recent Sanitize Command Completed Successfully.'


def test_sanitize_whose_eraser_died_while_unplugged_resumes_on_replug(sim):
    ctrl = sim.add_controller(address=OLD, namespaces=[4 * MiB], sanitize_seconds=30)
    ctrl.write(0, NEEDLE)
    ok(sim, 'sanitize', ctrl.char_path, '-a', '2')
    pid = poll(lambda: ctrl.sanitize_state()['eraser_pid'])
    ctrl.unplug()
    os.kill(pid, signal.SIGKILL)                    # power lost with the link
    poll(lambda: not ctrl.sanitize_state()['eraser_alive'])
    assert ctrl.sanitize_state()['in_progress']
    ctrl.update(sanitize_seconds=0.1)
    ctrl.replug()                                   # the probe finds the sanitize
    assert ctrl.wait_sanitize()['status'] == 'success'
    assert ctrl.find_on_media(NEEDLE) == []

"""The NVIDIA GPU driver over a fake sysfs tree: pGPUs, vGPU types, VFs."""
import json
import logging
import pathlib
import re

from oslo_config import cfg
import pytest

from steward.agent import drivers as driver_loader
from steward.conf import default
from steward.conf import nvidia as nvidia_conf
from steward.drivers.mdev import bus as mdev_bus
from steward.drivers import nvidia_gpu
from tests.fixtures import sysfs_tree
from tests.fixtures.mdev_tree import MdevTree

T4 = {'vendor': '0x10de', 'product': '0x1eb8', 'cls': '0x030200'}       # 3D controller
A10 = {'vendor': '0x10de', 'product': '0x2236', 'cls': '0x030200'}
T4_TYPES = {
    'nvidia-222': {'available': 16, 'name': 'GRID T4-1B', 'device_api': 'vfio-pci',
                   'description': 'num_heads=4, frl_config=45, framebuffer=1024M'},
    'nvidia-223': {'available': 8, 'name': 'GRID T4-2B'},
    'nvidia-230': {'available': 1, 'name': 'GRID T4-16Q'},
}
A10_VF_TYPES = {'nvidia-558': {'available': 1, 'name': 'NVIDIA A10-4Q'}}
GPU_A, GPU_B = '0000:84:00.0', '0000:85:00.0'       # T4s with the vGPU manager
WHOLE = '0000:86:00.0'                                 # a GPU that is no mdev parent
PF, VF1, VF2 = '0000:c1:00.0', '0000:c1:00.4', '0000:c1:00.5'   # SR-IOV vGPU (A10)


@pytest.fixture
def tree(tmp_path):
    t = MdevTree(tmp_path / 'sys')
    t.add_pci_parent(GPU_A, T4_TYPES, **T4)
    t.add_pci_parent(GPU_B, T4_TYPES, **T4)
    sysfs_tree.make_pci(t.root, WHOLE, '0x10de', '0x2204', cls='0x030000')   # VGA
    sysfs_tree.make_pci(t.root, '0000:86:00.1', '0x10de', '0x1aef', cls='0x040300')
    sysfs_tree.make_pci(t.root, '0000:00:02.0', '0x8086', '0x1912', cls='0x030000')
    sysfs_tree.make_pci(t.root, PF, A10['vendor'], A10['product'], cls=A10['cls'])
    for vf in (VF1, VF2):
        t.add_pci_parent(vf, A10_VF_TYPES, physfn=PF, **A10)
    return t


@pytest.fixture
def make(conf, tree):
    conf.set_override('sysfs_root', str(tree.root))
    groups = []

    def _make(types=(), addresses=None, include_vfs=False, host='host-a'):
        conf.set_override('enabled_vgpu_types', list(types), group='nvidia_gpu')
        conf.set_override('include_vfs', include_vfs, group='nvidia_gpu')
        nvidia_conf.register_vgpu_groups(conf)
        for type_name, addrs in (addresses or {}).items():
            group = nvidia_conf.vgpu_group(type_name)
            conf.set_override('device_addresses', addrs, group=group)
            groups.append(group)
        return nvidia_gpu.NvidiaGpuDriver(conf, host)
    yield _make
    for group in groups:
        conf.clear_override('device_addresses', group=group)


def report(driver):
    out = {}
    for dev in driver.discover():
        [dep] = dev.deployable_list
        out[json.loads(dev.std_board_info)['address']] = dep
    return out


def test_no_vgpu_type_every_gpu_is_a_pgpu(make, tree):
    deps = report(make())
    # the audio function, the Intel GPU, the VFs and the PF with VFs are not
    assert sorted(deps) == [GPU_A, GPU_B, WHOLE]
    dep = deps[WHOLE]
    assert dep.name == f'host-a_{WHOLE}' and dep.driver_name == 'nvidia_gpu'
    assert (dep.resource_class, dep.num_accelerators) == ('PGPU', 1)
    assert dep.traits == frozenset({'CUSTOM_NVIDIA_2204'})
    [handle] = dep.attach_handle_list
    assert handle.attach_type == 'PCI'
    assert json.loads(handle.attach_info) == {'domain': '0000', 'bus': '86',
                                              'device': '00', 'function': '0'}


def test_device_fields(make):
    [dev] = [d for d in make().discover() if d.model == '2204']
    assert (dev.vendor, dev.type, dev.driver_name) == ('10de', 'GPU', 'nvidia_gpu')
    assert dev.controlpath_id.cpid_type == 'PCI'
    assert json.loads(dev.controlpath_id.cpid_info) == {
        'domain': '0000', 'bus': '86', 'device': '00', 'function': '0'}


def test_vgpu_types_by_address(make, tree):
    tree.create_instance(GPU_A, 'nvidia-222')
    deps = report(make(['nvidia-222', 'nvidia-223'],
                       {'nvidia-222': [GPU_A], 'nvidia-223': [GPU_B.upper()]}))
    assert sorted(deps) == [GPU_A, GPU_B, WHOLE]
    a, b = deps[GPU_A], deps[GPU_B]
    assert (a.resource_class, a.num_accelerators) == ('VGPU', 16)    # 15 free + 1 made
    assert (b.resource_class, b.num_accelerators) == ('VGPU', 8)
    assert a.traits == frozenset({'CUSTOM_NVIDIA_1EB8_T4_1B'})
    assert b.traits == frozenset({'CUSTOM_NVIDIA_1EB8_T4_2B'})
    assert len(a.attach_handle_list) == 16
    assert {h.attach_type for h in a.attach_handle_list} == {'MDEV'}
    assert {json.loads(h.attach_info)['asked_type'] for h in b.attach_handle_list} == {
        'nvidia-223'}
    assert json.loads(a.attach_handle_list[0].attach_info) == {
        'asked_type': 'nvidia-222', 'domain': '0000', 'bus': '84', 'device': '00',
        'function': '0'}
    assert deps[WHOLE].resource_class == 'PGPU'


def test_one_type_without_addresses_applies_to_every_gpu_offering_it(make):
    deps = report(make(['nvidia-230']))
    assert {a: (d.resource_class, d.num_accelerators) for a, d in deps.items()} == {
        GPU_A: ('VGPU', 1), GPU_B: ('VGPU', 1), WHOLE: ('PGPU', 1)}
    assert deps[GPU_A].traits == frozenset({'CUSTOM_NVIDIA_1EB8_T4_16Q'})


def test_vfs_are_vgpu_parents_only_with_include_vfs(make, caplog):
    types, addresses = ['nvidia-558'], {'nvidia-558': [VF1, VF2]}
    assert sorted(report(make(types, addresses))) == [GPU_A, GPU_B, WHOLE]
    assert f'{VF1} is configured for vGPU type nvidia-558 but is not an NVIDIA GPU on ' \
           f'this host (VFs need include_vfs = true)' in caplog.text
    deps = report(make(types, addresses, include_vfs=True))
    assert sorted(deps) == [GPU_A, GPU_B, WHOLE, VF1, VF2]
    assert deps[VF1].traits == frozenset({'CUSTOM_NVIDIA_2236_A10_4Q'})
    assert deps[VF1].num_accelerators == 1
    vf = next(d for d in make(types, addresses, include_vfs=True).discover()
              if json.loads(d.std_board_info)['address'] == VF1)
    assert json.loads(vf.std_board_info)['physfn'] == PF


def test_vf_without_a_type_is_not_reported_whole(make, caplog):
    with caplog.at_level(logging.INFO, logger=nvidia_gpu.__name__):
        deps = report(make(['nvidia-558'], {'nvidia-558': [VF1]}, include_vfs=True))
    assert VF1 in deps and VF2 not in deps and PF not in deps
    assert f'VF {VF2} has no vGPU type' in caplog.text
    assert f'{PF} has 2 VFs enabled; not reported as a PGPU' in caplog.text


def test_configured_type_the_gpu_does_not_offer(make, tree, caplog):
    driver = make(['nvidia-558', 'nvidia-222'],
                  {'nvidia-558': [GPU_A], 'nvidia-222': [WHOLE]})
    for _ in range(2):
        deps = report(driver)
    assert sorted(deps) == [GPU_B]              # the two misconfigured GPUs withheld
    assert caplog.text.count(f'{GPU_A} does not offer vGPU type nvidia-558 (unknown') == 1
    assert f'{WHOLE} does not offer vGPU type nvidia-222 (not an mdev parent' in caplog.text


def test_configuration_errors(make, caplog):
    with caplog.at_level(logging.ERROR):
        driver = make(['nvidia-222', 'nvidia-223', 'nvidia-230', ''],
                      {'nvidia-222': [GPU_A, 'not-an-address'],
                       'nvidia-223': [GPU_A, GPU_B]})
    assert driver.vgpu_by_address == {GPU_A: 'nvidia-222', GPU_B: 'nvidia-223'}
    assert driver.default_vgpu_type is None
    assert "'not-an-address' is not a PCI address" in caplog.text
    assert f'{GPU_A} is already mapped to vGPU type nvidia-222' in caplog.text
    assert 'vGPU type nvidia-230 has no [vgpu_nvidia-230] device_addresses' in caplog.text
    assert "'' is not a vGPU type name" in caplog.text


def test_mdev_types_are_read_by_the_shared_manager(make, tree, caplog):
    driver = make(['nvidia-222'], {'nvidia-222': [GPU_A, GPU_B]})
    assert isinstance(driver._mdev, mdev_bus.MdevBusManager)
    tree.write(GPU_A, 'nvidia-222', 'available_instances', 'n/a')
    with caplog.at_level(logging.ERROR, logger=mdev_bus.__name__):
        deps = report(driver)
    assert sorted(deps) == [GPU_B, WHOLE]
    assert f'mdev type nvidia-222 of {GPU_A}: available_instances holds' in caplog.text


def test_enabled_by_name(conf, tree):
    conf.set_override('sysfs_root', str(tree.root))
    [driver] = driver_loader.load(['nvidia_gpu'], conf, 'h')
    assert isinstance(driver, nvidia_gpu.NvidiaGpuDriver) and driver.shares_parents
    assert len(driver.discover()) == 3


# -- configuration files as operators write them --------------------------------------
def driver_from_file(tmp_path, text, sysfs_root):
    path = tmp_path / 'steward.conf'
    path.write_text(text)
    opts = cfg.ConfigOpts()
    opts.register_opts([o for o in default.opts if o.name == 'sysfs_root'])
    nvidia_conf.register_opts(opts)
    opts(['--config-file', str(path)], project='steward', default_config_files=[])
    opts.set_override('sysfs_root', str(sysfs_root))
    return nvidia_gpu.NvidiaGpuDriver(opts, 'host-a')


def test_doc_snippets_work_verbatim(tmp_path, tree, caplog):
    doc = (pathlib.Path(__file__).parents[2] / 'doc' / 'drivers' / 'nvidia_gpu.md')
    blocks = re.findall(r'```ini\n(.*?)```', doc.read_text(), re.S)
    assert len(blocks) == 4
    mapped = []
    with caplog.at_level(logging.ERROR):
        for block in blocks:
            driver = driver_from_file(tmp_path, block, tree.root)
            mapped.append((driver.vgpu_by_address, driver.default_vgpu_type,
                           driver.include_vfs))
    assert 'ERROR' not in caplog.text
    assert mapped == [
        ({}, None, False),
        ({GPU_A: 'nvidia-222', GPU_B: 'nvidia-222', WHOLE: 'nvidia-223'}, None, False),
        ({}, 'nvidia-222', False),
        ({VF1: 'nvidia-558', VF2: 'nvidia-558', '0000:c1:00.6': 'nvidia-558',
          '0000:c1:00.7': 'nvidia-558'}, None, True)]


def test_upstream_group_name_is_accepted(tmp_path, tree):
    driver = driver_from_file(tmp_path, '[gpu_devices]\nenabled_vgpu_types = nvidia-223\n'
                              f'[vgpu_nvidia-223]\ndevice_addresses = {GPU_B}\n',
                              tree.root)
    assert driver.vgpu_by_address == {GPU_B: 'nvidia-223'}
    deps = report(driver)
    assert (deps[GPU_B].resource_class, deps[GPU_B].num_accelerators) == ('VGPU', 8)
    assert deps[GPU_A].resource_class == 'PGPU'

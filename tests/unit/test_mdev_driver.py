"""The generic mdev driver: configuration, and discovery over fake sysfs trees."""
import json
import logging
import pathlib
import re

from oslo_config import cfg
import pytest

from steward.agent import drivers as driver_loader
from steward.common import exception
from steward.conf import mdev as mdev_conf
from steward.drivers.mdev import driver as mdev
from tests.fixtures.mdev_tree import I915_TYPES, MDPY_TYPES, MTTY_TYPES, MdevTree

GVT = '0000:00:02.0'
# The spec's cyborg.conf example, values exactly as written there (trailing comma).
SPEC_EXAMPLE = [
    '{ "address": "0000:41:00.0", "mdev_type": "nvidia-319", "max_instances": 8, '
    '"resource_class": "VGPU", "traits": ["CUSTOM_NVIDIA_V100", "VULKAN"] },',
    '{ "address": "0000:42:00.0", "mdev_type": "i915-GVTg_V5_4" }',
]


def entry(**fields):
    return json.dumps(fields)


@pytest.fixture
def tree(tmp_path):
    t = MdevTree(tmp_path / 'sys')
    t.add_virtual_parent('mtty', MTTY_TYPES)
    t.add_virtual_parent('mdpy', MDPY_TYPES)
    t.add_pci_parent(GVT, I915_TYPES)
    return t


@pytest.fixture
def make(conf, tree):
    conf.set_override('sysfs_root', str(tree.root))

    def _make(*entries, host='host-a'):
        conf.set_override('device_spec', list(entries), group='mdev')
        return mdev.MdevDriver(conf, host)
    return _make


def by_name(devices):
    return {dep.name: dep for dev in devices for dep in dev.deployable_list}


# -- configuration ------------------------------------------------------------------
def test_spec_example_parses_verbatim():
    first, second = mdev.load_entries(SPEC_EXAMPLE)
    assert (first.address, first.mdev_type, first.max_instances) == (
        '0000:41:00.0', 'nvidia-319', 8)
    assert first.resource_class == 'VGPU'
    assert first.traits == ('CUSTOM_NVIDIA_V100', 'CUSTOM_VULKAN')
    assert (second.address, second.mdev_type, second.max_instances,
            second.resource_class, second.traits) == (
        '0000:42:00.0', 'i915-GVTg_V5_4', None, None, ())


@pytest.mark.parametrize('raw,reason', [
    ('{"address": "mtty"', 'not valid JSON'),
    ('["mtty", "mtty-2"]', 'must be a JSON object'),
    ('{"mdev_type": "mtty-2"}', 'address required'),
    ('{"address": "mtty"}', 'mdev_type required'),
    ('{}', 'address and mdev_type required'),
    ('{"address": "", "mdev_type": "mtty-2"}', 'address "" must be a non-empty name'),
    ('{"address": "mtty", "mdev_type": 2}', 'mdev_type 2 must be'),
    ('{"address": "../mtty", "mdev_type": "mtty-2"}', 'must be a non-empty name'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "max_instances": -1}',
     'max_instances -1 must be an integer >= 0'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "max_instances": "4"}',
     'max_instances "4" must be'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "max_instances": 2.5}',
     'max_instances 2.5 must be'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "max_instances": true}',
     'max_instances true must be'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "max_instance": 4}',
     "unknown key(s) ['max_instance']"),
    ('{"address": "mtty", "mdev_type": "mtty-2", "traits": 5}', 'traits 5 must be'),
    ('{"address": "mtty", "mdev_type": "mtty-2", "resource_class": "--"}',
     'has no letters or digits'),
])
def test_invalid_entries_are_refused_quoting_the_entry(raw, reason):
    with pytest.raises(exception.InvalidConfiguration) as err:
        mdev.parse_entry(raw)
    assert f'[mdev] device_spec entry {raw!r}' in str(err.value)
    assert reason in str(err.value)
    assert err.value.code == 'cyb.config.invalid'


def test_invalid_entries_are_logged_at_start_and_skipped(make, caplog):
    bad = '{"address": "mtty", "mdev_type": "mtty-1", "max_instances": -3}'
    with caplog.at_level(logging.ERROR):
        driver = make(bad, entry(address='mtty', mdev_type='mtty-2'), 'nonsense',
                      entry(address='mtty', mdev_type='mtty-2', max_instances=1))
    assert [(e.address, e.mdev_type, e.max_instances) for e in driver.entries] == [
        ('mtty', 'mtty-2', None)]
    assert repr(bad) in caplog.text and "'nonsense'" in caplog.text
    assert 'repeats parent mtty type mtty-2' in caplog.text
    assert list(by_name(driver.discover())) == ['host-a_mdev_mtty_mtty-2']


def test_no_entry_reports_nothing(make, caplog):
    driver = make()
    driver.init_host()
    assert driver.discover() == []
    assert 'no valid entry' in caplog.text


# -- discovery ----------------------------------------------------------------------
def test_mtty_and_gvt_resource_classes_and_totals(make, tree):
    tree.create_instance('mtty', 'mtty-2')
    tree.create_instance('mtty', 'mtty-2')
    devices = make(entry(address='mtty', mdev_type='mtty-2'),
                   entry(address=GVT, mdev_type='i915-GVTg_V5_4')).discover()
    assert [(d.type, d.driver_name) for d in devices] == [('MDEV', 'mdev')] * 2
    deps = by_name(devices)
    mtty2 = deps['host-a_mdev_mtty_mtty-2']
    gvt = deps[f'host-a_mdev_{GVT}_i915-GVTg_V5_4']
    assert mtty2.resource_class == 'CUSTOM_MDEV_MTTY_2'
    assert gvt.resource_class == 'CUSTOM_MDEV_I915_GVTG_V5_4'
    # total = available_instances (10 after two creations) + created_instances (2)
    assert mtty2.num_accelerators == 12 == len(mtty2.attach_handle_list)
    assert gvt.num_accelerators == 8 == len(gvt.attach_handle_list)
    assert mtty2.traits == gvt.traits == frozenset()
    assert mtty2.driver_name == 'mdev'


def test_one_device_per_parent_one_deployable_per_configured_type(make):
    devices = make(entry(address='mtty', mdev_type='mtty-1'),
                   entry(address='mdpy', mdev_type='mdpy-hd'),
                   entry(address='mtty', mdev_type='mtty-2')).discover()
    assert [(d.model, [dep.name for dep in d.deployable_list]) for d in devices] == [
        ('mdpy', ['host-a_mdev_mdpy_mdpy-hd']),
        ('mtty', ['host-a_mdev_mtty_mtty-1', 'host-a_mdev_mtty_mtty-2'])]
    mtty = devices[1]
    assert json.loads(mtty.std_board_info) == {'parent': 'mtty',
                                               'mdev_types': ['mtty-1', 'mtty-2']}


def test_pci_parent_attach_info_and_controlpath(make):
    [dev] = make(entry(address=GVT.upper(), mdev_type='i915-GVTg_V5_4')).discover()
    assert (dev.vendor, dev.model) == ('8086', '1912')
    assert dev.controlpath_id.cpid_type == 'PCI'
    assert json.loads(dev.controlpath_id.cpid_info) == {
        'domain': '0000', 'bus': '00', 'device': '02', 'function': '0'}
    handles = dev.deployable_list[0].attach_handle_list
    assert {h.attach_type for h in handles} == {'MDEV'}
    assert {h.attach_info for h in handles} == {json.dumps(
        {'asked_type': 'i915-GVTg_V5_4', 'bus': '00', 'device': '02', 'domain': '0000',
         'function': '0'})}


def test_virtual_parent_attach_info_and_controlpath(make):
    [dev] = make(entry(address='mtty', mdev_type='mtty-1')).discover()
    assert (dev.vendor, dev.model) == ('', 'mtty')
    assert dev.controlpath_id.cpid_type == 'SYSFS'
    assert json.loads(dev.controlpath_id.cpid_info) == {'class': 'mdev_bus',
                                                        'name': 'mtty'}
    info = json.loads(dev.deployable_list[0].attach_handle_list[0].attach_info)
    assert info == {'asked_type': 'mtty-1', 'domain': '', 'bus': '', 'device': 'mtty',
                    'function': ''}


@pytest.mark.parametrize('cap,total', [(4, 4), (0, 0), (12, 12), (100, 12)])
def test_max_instances_caps_the_total(make, cap, total):
    [dev] = make(entry(address='mtty', mdev_type='mtty-2', max_instances=cap)).discover()
    dep = dev.deployable_list[0]
    assert dep.num_accelerators == total == len(dep.attach_handle_list)


@pytest.mark.parametrize('configured,expected', [
    ('VGPU', 'VGPU'), ('vgpu', 'VGPU'), ('CUSTOM_SERIAL', 'CUSTOM_SERIAL'),
    ('serial-2', 'CUSTOM_SERIAL_2'), ('custom_serial', 'CUSTOM_SERIAL'),
])
def test_resource_class_override(make, configured, expected):
    [dev] = make(entry(address='mtty', mdev_type='mtty-2',
                       resource_class=configured)).discover()
    assert dev.deployable_list[0].resource_class == expected


def test_traits_are_normalised_and_numbered(make):
    [dev] = make(entry(address='mtty', mdev_type='mtty-2',
                       traits=['HW_GPU_API_VULKAN', 'serial', 'CUSTOM_FAST'])).discover()
    attrs = [(a.key, a.value) for a in dev.deployable_list[0].attribute_list]
    assert attrs == [('rc', 'CUSTOM_MDEV_MTTY_2'), ('trait0', 'HW_GPU_API_VULKAN'),
                     ('trait1', 'CUSTOM_SERIAL'), ('trait2', 'CUSTOM_FAST')]


def test_type_not_offered_and_parent_absent_are_logged_and_skipped(make, caplog):
    driver = make(entry(address='mtty', mdev_type='mtty-8'),
                  entry(address='mtty', mdev_type='mtty-1'),
                  entry(address='0000:41:00.0', mdev_type='nvidia-319'),
                  entry(address='mdpy', mdev_type='mdpy-4k'))
    for _ in range(3):
        devices = driver.discover()
    assert list(by_name(devices)) == ['host-a_mdev_mtty_mtty-1']
    assert caplog.text.count('parent mtty does not offer type mtty-8') == 1
    assert caplog.text.count('parent 0000:41:00.0 of [mdev] device_spec is not in') == 1
    assert 'parent mdpy does not offer type mdpy-4k' in caplog.text


def test_malformed_type_is_skipped_the_others_reported(make, tree):
    tree.write('mtty', 'mtty-1', 'available_instances', 'lots')
    devices = make(entry(address='mtty', mdev_type='mtty-1'),
                   entry(address='mtty', mdev_type='mtty-2')).discover()
    assert list(by_name(devices)) == ['host-a_mdev_mtty_mtty-2']


def test_capacity_follows_sysfs_between_cycles(make, tree):
    driver = make(entry(address='mtty', mdev_type='mtty-1'),
                  entry(address='mtty', mdev_type='mtty-2'))

    def totals():
        return {n.rsplit('_', 1)[1]: d.num_accelerators
                for n, d in by_name(driver.discover()).items()}
    assert totals() == {'mtty-1': 24, 'mtty-2': 12}
    # Three single-port mdevs created outside Steward: mtty-1's total is unchanged
    # (available 21 + created 3); mtty-2 has 21 free ports left, 10 dual-port ones.
    for _ in range(3):
        tree.create_instance('mtty', 'mtty-1')
    tree.set_available('mtty', 'mtty-2', 10)
    assert totals() == {'mtty-1': 24, 'mtty-2': 10}


def test_enabled_by_name_with_the_configured_sysfs_root(conf, tree):
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [entry(address='mtty', mdev_type='mtty-2')],
                      group='mdev')
    [driver] = driver_loader.load(['mdev'], conf, 'host-a')
    assert isinstance(driver, mdev.MdevDriver) and driver.shares_parents
    assert list(by_name(driver.discover())) == ['host-a_mdev_mtty_mtty-2']


# -- the operator page's snippets, parsed as oslo.config reads a file ----------------
def ini_blocks(doc):
    text = (pathlib.Path(__file__).parents[2] / 'doc' / 'drivers' / doc).read_text()
    return re.findall(r'```ini\n(.*?)```', text, re.S)


def test_doc_snippets_work_verbatim(tmp_path, caplog):
    blocks = ini_blocks('mdev.md')
    assert len(blocks) == 2
    for i, block in enumerate(blocks):
        path = tmp_path / f'snippet{i}.conf'
        path.write_text(block)
        opts = cfg.ConfigOpts()
        mdev_conf.register_opts(opts)
        opts(['--config-file', str(path)], project='steward', default_config_files=[])
        with caplog.at_level(logging.ERROR):
            entries = mdev.load_entries(opts.mdev.device_spec)
        assert len(entries) == block.count('device_spec =') > 0
    assert 'ERROR' not in caplog.text
    assert [(e.address, e.mdev_type, e.traits) for e in entries] == [
        ('mtty', 'mtty-2', ()), ('mtty', 'mtty-1', ()),
        ('mdpy', 'mdpy-vga', ('CUSTOM_DISPLAY',))]


def test_several_types_on_one_parent_warn_once(make, caplog):
    """mtty offers 24 single-port and 12 dual-port instances of the same 24 ports:
    offered side by side, Placement would promise 36. Said once, not every cycle;
    again when it comes back after going away."""
    driver = make(entry(address='mtty', mdev_type='mtty-1'),
                  entry(address='mtty', mdev_type='mtty-2'),
                  entry(address='mdpy', mdev_type='mdpy-hd'))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            driver.discover()
    said = [r.getMessage() for r in caplog.records if 'shared capacity' in r.getMessage()]
    assert len(said) == 1 and 'parent mtty' in said[0]
    assert '(mtty-1 24, mtty-2 12)' in said[0]
    single = make(entry(address='mtty', mdev_type='mtty-1'))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        single.discover()
    assert not [r for r in caplog.records if 'shared capacity' in r.getMessage()]

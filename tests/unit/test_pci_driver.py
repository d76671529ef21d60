"""The pci driver on fake sysfs trees: what it reports, SR-IOV, matching, and every
accepted and rejected spelling of the ``managed`` tag (spec 4)."""
import json
import logging
import pathlib
import re

import pytest
from oslo_config import cfg

from steward.conf import agent as agent_opts
from steward.conf import default as default_opts
from steward.conf import pci as pci_opts
from steward.drivers.pci import driver as pci
from tests.fixtures.sysfs_tree import make_netdev, make_pci, make_sriov

VFS = ['0000:25:00.4', '0000:25:00.5', '0000:25:00.6']


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / 'sys'
    # An SR-IOV PF with three VFs enabled; one VF is bound to a VFIO variant driver.
    make_sriov(root, '0000:25:00.0', '0x10de', '0x2236', VFS[:2], vf_product='0x25b6')
    make_pci(root, VFS[2], '0x10de', '0x25b6', physfn='0000:25:00.0',
             driver='nvgrace_gpu_vfio_pci')
    # Plain functions without VFs, one of them a network interface.
    make_pci(root, '0000:0a:00.0', '0x8086', '0x0d58')
    make_pci(root, '0000:0a:00.1', '0x8086', '0x0d58', driver='i40e')
    make_netdev(root, 'ens1f1', '0000:0a:00.1')
    make_pci(root, '0001:81:00.0', '0x1af4', '0x1042', cls='0x018000', driver='virtio-pci')
    return root


def make_driver(conf, tree, *entries, host='cmp1'):
    conf.set_override('sysfs_root', str(tree))
    conf.set_override('device_spec', [e if isinstance(e, str) else json.dumps(e)
                                      for e in entries], group='pci')
    return pci.PciDriver(conf, host)


def reported(driver):
    return {json.loads(d.std_board_info)['address']: d for d in driver.discover()}


def handle_info(device):
    (dep,) = device.deployable_list
    (handle,) = dep.attach_handle_list
    return json.loads(handle.attach_info)


def attrs(device):
    return {a.key: a.value for a in device.deployable_list[0].attribute_list}


def errors(caplog):
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.ERROR and r.name == 'steward.drivers.pci.driver']


# -- what one device looks like ----------------------------------------------------
def test_a_vf_is_reported_as_one_pci_device(conf, tree):
    devs = reported(make_driver(conf, tree, {'address': '0000:25:00.6'}))
    assert list(devs) == ['0000:25:00.6']
    dev = devs['0000:25:00.6']
    assert (dev.type, dev.vendor, dev.model, dev.driver_name) == ('PCI', '10de', '25b6',
                                                                  'pci')
    assert json.loads(dev.std_board_info) == {
        'vendor_id': '10de', 'product_id': '25b6', 'class': '120000',
        'address': '0000:25:00.6', 'driver': 'nvgrace_gpu_vfio_pci',
        'physfn': '0000:25:00.0'}
    assert dev.controlpath_id.cpid_type == 'PCI'
    assert json.loads(dev.controlpath_id.cpid_info) == {
        'domain': '0000', 'bus': '25', 'device': '00', 'function': '6'}
    (dep,) = dev.deployable_list
    assert (dep.name, dep.num_accelerators, dep.driver_name) == (
        'cmp1_0000:25:00.6', 1, 'pci')
    assert attrs(dev) == {'rc': 'CUSTOM_PCI_10DE_25B6'}
    (handle,) = dep.attach_handle_list
    assert handle.attach_type == 'PCI'
    assert handle_info(dev) == {'domain': '0000', 'bus': '25', 'device': '00',
                                'function': '6', 'managed': True}


def test_a_function_without_vfs_has_no_physfn(conf, tree):
    dev = reported(make_driver(conf, tree, {'vendor_id': '1af4'}))['0001:81:00.0']
    board = json.loads(dev.std_board_info)
    assert 'physfn' not in board and board['class'] == '018000'
    assert board['driver'] == 'virtio-pci'
    assert attrs(dev)['rc'] == 'CUSTOM_PCI_1AF4_1042'


def test_unbound_function_reports_driver_none(conf, tree):
    dev = reported(make_driver(conf, tree, {'address': '0a:00.0'}))['0000:0a:00.0']
    assert json.loads(dev.std_board_info)['driver'] is None


def test_no_device_spec_reports_nothing(conf, tree):
    driver = make_driver(conf, tree)
    driver.init_host()
    assert driver.discover() == []


def test_a_pf_with_vfs_enabled_is_not_handed_out(conf, tree, caplog):
    caplog.set_level(logging.INFO, logger='steward.drivers.pci')
    driver = make_driver(conf, tree, {'vendor_id': '10de'})
    assert sorted(reported(driver)) == VFS
    assert sorted(reported(driver)) == VFS      # and again next cycle
    said = [r.getMessage() for r in caplog.records if '0000:25:00.0' in r.getMessage()]
    assert len(said) == 1 and 'VFs enabled' in said[0]


def test_a_pf_is_handed_out_once_its_vfs_are_gone(conf, tmp_path):
    root = tmp_path / 'sys'
    make_pci(root, '0000:25:00.0', '0x10de', '0x2236')
    assert list(reported(make_driver(conf, root, {'vendor_id': '10de'}))) == [
        '0000:25:00.0']


# -- matching (Nova's device_spec rules) -------------------------------------------
@pytest.mark.parametrize('entry,expected', [
    ({'vendor_id': '10de', 'product_id': '25b6'}, VFS),
    ({'vendor_id': '0x10DE', 'product_id': '25B6'}, VFS),
    ({'address': '*:25:00.*'}, VFS),
    ({'address': '0000:25:00.4'}, ['0000:25:00.4']),
    ({'address': '25:00.5'}, ['0000:25:00.5']),
    ({'address': '*:*:*.1'}, ['0000:0a:00.1']),
    ({'address': {'domain': '.*', 'bus': '25', 'slot': '00', 'function': '[45]'}},
     ['0000:25:00.4', '0000:25:00.5']),
    ({'address': {'domain': '0001'}}, ['0001:81:00.0']),
    ({'address': {'bus': '0A'}}, ['0000:0a:00.0', '0000:0a:00.1']),
    ({'devname': 'ens1f1'}, ['0000:0a:00.1']),
    ({'devname': 'nosuch0'}, []),
    ({'vendor_id': '10de', 'product_id': '2236'}, []),     # the PF, VFs enabled
    ({'vendor_id': '8086', 'address': '*:25:*.*'}, []),
])
def test_matching(conf, tree, entry, expected):
    assert sorted(reported(make_driver(conf, tree, entry))) == expected


def test_first_matching_entry_wins(conf, tree):
    driver = make_driver(conf, tree,
                         {'address': '0000:25:00.4', 'managed': False,
                          'resource_class': 'vfio-variant-vf'},
                         {'vendor_id': '10de', 'traits': ['gold']})
    devs = reported(driver)
    assert handle_info(devs['0000:25:00.4'])['managed'] is False
    assert attrs(devs['0000:25:00.4']) == {'rc': 'CUSTOM_VFIO_VARIANT_VF'}
    for vf in VFS[1:]:
        assert handle_info(devs[vf])['managed'] is True
        assert attrs(devs[vf]) == {'rc': 'CUSTOM_PCI_10DE_25B6', 'trait0': 'CUSTOM_GOLD'}


def test_discovery_is_stable_across_cycles(conf, tree):
    driver = make_driver(conf, tree, {'vendor_id': '*'})
    first = [d.to_dict() for d in driver.discover()]
    assert first == [d.to_dict() for d in driver.discover()]
    assert len(first) == 6


# -- managed -----------------------------------------------------------------------
@pytest.mark.parametrize('value,expected', [
    (True, True), (False, False),
    ('yes', True), ('no', False), ('true', True), ('false', False),
    ('1', True), ('0', False), ('on', True), ('off', False),
    ('y', True), ('n', False), ('t', True), ('f', False),
    ('YES', True), ('No', False), ('True', True), ('FALSE', False), ('On', True),
    ('oFF', False), (' yes ', True),
    (1, True), (0, False),          # Nova passes these through the same conversion
])
def test_managed_accepted(conf, tree, value, expected, caplog):
    driver = make_driver(conf, tree, {'address': '*:25:00.4', 'managed': value})
    info = handle_info(reported(driver)['0000:25:00.4'])
    assert info['managed'] is expected
    assert errors(caplog) == []


def test_managed_absent_is_true(conf, tree):
    info = handle_info(reported(make_driver(conf, tree, {'address': '*:25:00.4'}))
                       ['0000:25:00.4'])
    assert info['managed'] is True


@pytest.mark.parametrize('value', [
    'maybe', '', ' ', 'yess', 'enabled', 'none', 'null', 2, -1, 1.0, 0.0, None, [],
    [True], {}, {'managed': False},
])
def test_managed_rejected_entry_is_logged_and_skipped(conf, tree, value, caplog):
    bad = json.dumps({'address': '0000:25:00.4', 'managed': value})
    driver = make_driver(conf, tree, bad, {'vendor_id': '8086', 'managed': 'no'},
                         {'vendor_id': '10de'})
    devs = reported(driver)
    # The bad entry's device is withheld, not handed to the broader later entry as
    # managed=true; the other entries work as configured.
    assert sorted(devs) == ['0000:0a:00.0', '0000:0a:00.1', '0000:25:00.5',
                            '0000:25:00.6']
    assert handle_info(devs['0000:0a:00.0'])['managed'] is False
    assert handle_info(devs['0000:25:00.5'])['managed'] is True
    (msg,) = errors(caplog)
    assert bad in msg
    assert f'managed {json.dumps(value)} is not a boolean' in msg
    assert 'cyb.config.invalid' in msg and 'skipped' in msg
    assert sorted(reported(driver)) == sorted(devs)          # next cycle: same
    withheld = [r for r in caplog.records
                if '0000:25:00.4 is not reported' in r.getMessage()]
    assert len(withheld) == 1 and withheld[0].levelno == logging.WARNING


@pytest.mark.parametrize('raw,fragment', [
    ('{"address": "0000:25:00.4", "managed": no}', 'not valid JSON'),
    ('["managed", false]', 'must be a JSON object'),
    ('{"address": "25-00-4", "managed": false}', 'bus:slot.function'),
    ('{"vendor_id": "10dex", "managed": false}', 'hex id'),
    ('{"address": {"bus": "(25"}}', 'bad regex'),
])
def test_unparseable_entry_is_logged_and_skipped(conf, tree, raw, fragment, caplog):
    driver = make_driver(conf, tree, raw, {'vendor_id': '1af4'})
    assert list(reported(driver)) == ['0001:81:00.0']
    (msg,) = errors(caplog)
    assert raw in msg and fragment in msg and '[pci] device_spec' in msg


def test_only_invalid_entries_warns_at_start(conf, tree, caplog):
    driver = make_driver(conf, tree, {'vendor_id': '10de', 'managed': 'maybe'})
    driver.init_host()
    assert driver.discover() == []
    assert any('no valid entry' in r.getMessage() for r in caplog.records)


# -- resource class and traits -----------------------------------------------------
@pytest.mark.parametrize('value,expected', [
    ('CUSTOM_MY_VF', 'CUSTOM_MY_VF'),
    ('my_vf', 'CUSTOM_MY_VF'),
    ('custom_my-vf', 'CUSTOM_MY_VF'),
    ('vfio variant.vf', 'CUSTOM_VFIO_VARIANT_VF'),
    ('PGPU', 'PGPU'),
    ('vgpu', 'VGPU'),
    ('CUSTOM_CUSTOM_X', 'CUSTOM_CUSTOM_X'),
])
def test_resource_class_override(conf, tree, value, expected):
    dev = reported(make_driver(conf, tree, {'address': '*:25:00.4',
                                            'resource_class': value}))['0000:25:00.4']
    assert attrs(dev)['rc'] == expected


@pytest.mark.parametrize('value', ['', '  ', '---', 'CUSTOM_', 7, None, ['X'], 'X' * 256])
def test_bad_resource_class_is_rejected(conf, tree, value, caplog):
    raw = json.dumps({'address': '*:25:00.4', 'resource_class': value})
    assert reported(make_driver(conf, tree, raw, {'vendor_id': '1af4'})).keys() == {
        '0001:81:00.0'}
    (msg,) = errors(caplog)
    assert raw in msg and f'resource_class {json.dumps(value)}' in msg


@pytest.mark.parametrize('value,expected', [
    (['fast', 'CUSTOM_Gold-1'], {'trait0': 'CUSTOM_FAST', 'trait1': 'CUSTOM_GOLD_1'}),
    ('fast, gold', {'trait0': 'CUSTOM_FAST', 'trait1': 'CUSTOM_GOLD'}),     # Nova's form
    (['HW_GPU_API_VULKAN', 'hw_gpu_api_vulkan', 'x'],
     {'trait0': 'HW_GPU_API_VULKAN', 'trait1': 'CUSTOM_X'}),
    ([], {}),
])
def test_traits(conf, tree, value, expected):
    dev = reported(make_driver(conf, tree, {'address': '*:25:00.4',
                                            'traits': value}))['0000:25:00.4']
    assert attrs(dev) == dict(expected, rc='CUSTOM_PCI_10DE_25B6')


@pytest.mark.parametrize('value', [5, None, {'a': 1}, [''], [3], 'a,,b', ['***']])
def test_bad_traits_are_rejected(conf, tree, value, caplog):
    raw = json.dumps({'address': '*:25:00.4', 'traits': value})
    assert reported(make_driver(conf, tree, raw, {'address': '*:25:00.*'})).keys() == {
        '0000:25:00.5', '0000:25:00.6'}
    (msg,) = errors(caplog)
    assert raw in msg and 'traits' in msg


def test_unknown_keys_are_warned_about_not_fatal(conf, tree, caplog):
    driver = make_driver(conf, tree, {'address': '*:25:00.4', 'manged': False})
    assert handle_info(reported(driver)['0000:25:00.4'])['managed'] is True
    assert any("['manged']" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


# -- configuration files, as an operator writes them -------------------------------
SPEC_SNIPPETS = '''[pci]
{name} = {{"vendor_id": "10de",
                         "product_id": "25b6",
                         "address": "0000:25:00.4",
                         "managed": false}}
{name} = {{"vendor_id": "10de",
                         "product_id": "25b6",
                         "address": "0000:25:00.5",
                         "managed": "no"}}
{name} = {{"vendor_id": "10de", "product_id": "25b6"}}
'''


@pytest.mark.parametrize('name', ['passthrough_whitelist', 'device_spec'])
def test_the_specs_config_snippets_work_verbatim(tmp_path, tree, name):
    path = tmp_path / 'steward.conf'
    path.write_text(SPEC_SNIPPETS.format(name=name) + f'[DEFAULT]\nsysfs_root = {tree}\n')
    conf = cfg.ConfigOpts()
    conf.register_opts(default_opts.opts)
    pci_opts.register_opts(conf)
    conf(['--config-file', str(path)], project='steward', default_config_files=[])
    devs = reported(pci.PciDriver(conf, 'cmp1'))
    assert {a: handle_info(d)['managed'] for a, d in devs.items()} == {
        '0000:25:00.4': False, '0000:25:00.5': False, '0000:25:00.6': True}


def test_the_operator_pages_ini_examples_work_verbatim(tmp_path, tree, gpus, caplog):
    page = pathlib.Path(__file__).parents[2] / 'doc' / 'drivers' / 'pci.md'
    blocks = re.findall(r'```ini\n(.*?)```', page.read_text(), re.S)
    results = []
    for i, block in enumerate(blocks):
        path = tmp_path / f'{i}.conf'
        pooled = '"pool": true' in block
        path.write_text(block + f'[DEFAULT]\nsysfs_root = {gpus if pooled else tree}\n')
        conf = cfg.ConfigOpts()
        conf.register_opts(default_opts.opts)
        agent_opts.register_opts(conf)
        pci_opts.register_opts(conf)
        conf(['--config-file', str(path)], project='steward', default_config_files=[])
        found = reported(pci.PciDriver(conf, 'cmp1'))
        if pooled:
            # The pools page's example: one pool per NUMA node of the H100s.
            results.append(sorted({attrs(d)['pool'].rsplit('_', 1)[0]
                                   for d in found.values()}))
            continue
        results.append({a: (handle_info(d)['managed'], attrs(d).get('trait0'),
                            handle_info(d).get('live_migratable', False))
                        for a, d in found.items()})
    assert errors(caplog) == []
    assert results == [
        {vf: (True, None, False) for vf in VFS},
        {'0000:25:00.4': (False, None, False)},
        {'0000:25:00.4': (False, None, False)},
        {'0000:25:00.4': (False, None, False), '0000:25:00.5': (True, 'CUSTOM_GOLD', False),
         '0000:25:00.6': (True, 'CUSTOM_GOLD', False)},
        {'0000:25:00.4': (False, None, True)},          # live_migratable
        ['cmp1_PGPU_nonuma', 'cmp1_PGPU_numa0', 'cmp1_PGPU_numa1'],     # pools
    ]


def test_the_moves_pages_ini_examples_work_verbatim(tmp_path, caplog):
    """doc/moves.md's [pci] and [mdev] examples parse to live_migratable true."""
    from steward.conf import mdev as mdev_opts
    from steward.drivers.mdev import driver as mdev
    page = pathlib.Path(__file__).parents[2] / 'doc' / 'moves.md'
    blocks = re.findall(r'```ini\n(.*?)```', page.read_text(), re.S)
    assert [b.splitlines()[0] for b in blocks] == ['[pci]', '[mdev]']
    path = tmp_path / 'steward.conf'
    path.write_text(''.join(blocks))
    conf = cfg.ConfigOpts()
    pci_opts.register_opts(conf)
    mdev_opts.register_opts(conf)
    conf(['--config-file', str(path)], project='steward', default_config_files=[])
    (entry,) = pci.load_entries(conf.pci.device_spec)
    assert (entry.error, entry.managed, entry.live_migratable) == (None, False, True)
    (mdev_entry,) = mdev.load_entries(conf.mdev.device_spec)
    assert mdev_entry.live_migratable is True
    assert errors(caplog) == []


# -- pools (issue 52) and NUMA ----------------------------------------------------
@pytest.fixture
def gpus(tmp_path):
    """Four functions of one model: two on NUMA node 0, one on node 1, one whose
    kernel gives no node (-1)."""
    root = tmp_path / 'sys'
    for bdf, node in (('0000:18:00.0', 0), ('0000:19:00.0', 0), ('0000:98:00.0', 1),
                      ('0000:99:00.0', -1)):
        make_pci(root, bdf, '0x10de', '0x2330', cls='0x030200', driver='vfio-pci',
                 numa_node=node)
    return root


def test_numa_node_is_read_from_sysfs(conf, gpus):
    found = reported(make_driver(conf, gpus, {'vendor_id': '10de'}))
    nodes = {a: json.loads(d.std_board_info).get('numa_node') for a, d in found.items()}
    assert nodes == {'0000:18:00.0': 0, '0000:19:00.0': 0, '0000:98:00.0': 1,
                     '0000:99:00.0': None}
    assert [handle_info(found[a]).get('numa_node') for a in sorted(found)] == [0, 0, 1, None]
    # Untagged: no pool, each function its own provider as before.
    assert all('pool' not in attrs(d) for d in found.values())


def test_a_pooled_entry_puts_each_numa_node_in_a_pool_of_its_own(conf, gpus):
    found = reported(make_driver(conf, gpus, {'vendor_id': '10de', 'pool': True,
                                              'resource_class': 'PGPU'}, host='gpu7'))
    pools = {a: attrs(d)['pool'] for a, d in found.items()}
    assert pools['0000:18:00.0'] == pools['0000:19:00.0']
    assert len(set(pools.values())) == 3
    assert pools['0000:18:00.0'].startswith('gpu7_PGPU_numa0_')
    assert pools['0000:98:00.0'].startswith('gpu7_PGPU_numa1_')
    assert pools['0000:99:00.0'].startswith('gpu7_PGPU_nonuma_')
    # The name holds nothing a reboot changes: discovered again, the same.
    again = reported(make_driver(conf, gpus, {'vendor_id': '10de', 'pool': 'yes',
                                              'resource_class': 'PGPU'}, host='gpu7'))
    assert {a: attrs(d)['pool'] for a, d in again.items()} == pools


def test_two_pooled_entries_of_one_class_are_two_pools(conf, gpus):
    found = reported(make_driver(
        conf, gpus, {'address': '*:18:00.0', 'pool': True, 'resource_class': 'PGPU',
                     'traits': ['nvlink']},
        {'vendor_id': '10de', 'pool': True, 'resource_class': 'PGPU'}))
    assert attrs(found['0000:18:00.0'])['pool'] != attrs(found['0000:19:00.0'])['pool']


@pytest.mark.parametrize('value', ['maybe', 2, ['x']])
def test_a_bad_pool_tag_withholds_the_entry(conf, gpus, value, caplog):
    raw = json.dumps({'vendor_id': '10de', 'pool': value})
    assert reported(make_driver(conf, gpus, raw)) == {}
    (msg,) = errors(caplog)
    assert raw in msg and f'pool {json.dumps(value)}' in msg

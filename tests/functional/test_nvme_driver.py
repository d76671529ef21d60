"""The nvme driver on its own: init_host, discovery and cleanup against simulated
controllers under the real nvme-cli 2.3."""
import json
import os
import pathlib
import shlex
import shutil

import pytest

from steward.common import exception
from steward.drivers import cleanup_job
from steward.drivers.nvme import cleanup as nvme_cleanup
from steward.drivers.nvme import cli as nvme_cli
from steward.drivers.nvme import driver as nvme
from steward.drivers.nvme import sysfs as nvme_sysfs
from steward.privsep import blockio
from tests.fixtures import sysfs_tree
from tests.nvme_sim import Simulation

MiB = 2 ** 20


@pytest.fixture
def sim(tmp_path, conf, monkeypatch):
    s = Simulation(tmp_path / 'sim')
    for key, value in s.env.items():
        monkeypatch.setenv(key, value)
    conf.set_override('sysfs_root', s.sysfs_root)
    conf.set_override('dev_root', s.dev_root)
    conf.set_override('nvme_cli', s.nvme_cli, group='nvme')
    conf.set_override('device_spec', ['{"vendor_id": "8086"}'], group='nvme')
    yield s
    s.close()


def _driver(conf, specs=None):
    if specs is not None:
        conf.set_override('device_spec', specs, group='nvme')
    d = nvme.NvmeDriver(conf, 'compute-1')
    d.init_host()
    return d


def _clean(driver, dev, uuid='dev-1'):
    job = cleanup_job.CleanupJob(uuid)
    driver.cleanup({'uuid': uuid, 'std_board_info': dev.std_board_info}, job)
    return job.record


def test_discovery_reports_the_spec_shape(sim, conf):
    sim.add_controller(address='0000:0a:00.0', serial='S7DFNG0W700063',
                       model='3.2TB NVMe Gen4 U.2 SSD V', firmware='DNA8DNA8', wzs=False)
    [dev] = _driver(conf).discover()
    assert (dev.type, dev.vendor, dev.model) == ('NVME', '8086', '0a54')
    assert json.loads(dev.controlpath_id.cpid_info) == {
        'domain': '0000', 'bus': '0a', 'device': '00', 'function': '0'}
    [dep] = dev.deployable_list
    assert dep.name == 'compute-1_0000:0a:00.0' and dep.num_accelerators == 1
    assert dep.resource_class == 'CUSTOM_NVME_8086_0A54'
    assert dep.traits == {'HW_NVME_CES', 'HW_NVME_BES'}
    assert [h.attach_type for h in dep.attach_handle_list] == ['PCI']
    board = json.loads(dev.std_board_info)
    assert board['product_id'] == '0a54' and board['pci_address'] == '0000:0a:00.0'
    assert board['cleanup_action'] == 'sanitize_crypto'
    assert board['cleanup']['capabilities'] == {'ces': True, 'bes': True, 'wzs': False,
                                                'ns_mgmt': True, 'format_erase': True,
                                                'format_crypto': True}
    assert json.loads(dev.vendor_board_info) == {
        'serial': 'S7DFNG0W700063', 'model': '3.2TB NVMe Gen4 U.2 SSD V',
        'firmware': 'DNA8DNA8',
        'subsysnqn': 'nqn.2024-01.org.steward.nvme-sim:S7DFNG0W700063'}
    assert (board['cleanup']['lba_size'], board['cleanup']['lba_size_source']) == \
        (512, 'discovery')


def test_device_spec_filters(sim, conf):
    sim.add_controller(address='0000:0a:00.0')
    sim.add_controller(address='0000:0b:00.0', vendor_id='144d', product_id='a808')
    sysfs_tree.make_pci(pathlib.Path(sim.sysfs_root), '0000:0c:00.0',
                        '0x8086', '0x1572', cls='0x020000', driver='i40e')
    assert [json.loads(d.std_board_info)['pci_address'] for d in _driver(conf).discover()] \
        == ['0000:0a:00.0']                      # the NIC matches the spec, not NVMe
    got = _driver(conf, ['{"address": "*:0b:00.*"}']).discover()
    assert [d.deployable_list[0].resource_class for d in got] == ['CUSTOM_NVME_144D_A808']
    got = _driver(conf, ['{"address": {"bus": "0[ab]"}, "clear_action": "zero"}']).discover()
    assert [json.loads(d.std_board_info)['cleanup_action'] for d in got] == \
        ['write_zeroes', 'write_zeroes']
    assert _driver(conf, ['{"product_id": "ffff"}']).discover() == []


@pytest.mark.parametrize('spec,match', [
    ('{"vendor_id": "8086", "managed": true}', "unknown key\\(s\\) managed"),
    ('{"clear_action": "wipe"}', "clear_action 'wipe' is not one of"),
    ('{"clear_strategy": "fast"}', "clear_strategy 'fast'"),
    ('not json', 'not valid JSON'),
])
def test_bad_device_spec_stops_the_agent(sim, conf, spec, match):
    conf.set_override('device_spec', [spec], group='nvme')
    with pytest.raises(exception.InvalidConfiguration, match=match):
        nvme.NvmeDriver(conf, 'h')


def test_init_host_checks_nvme_cli(sim, conf):
    sim.remove_nvme_cli()
    with pytest.raises(exception.NvmeCliMissing, match='install the nvme-cli package'):
        nvme.NvmeDriver(conf, 'h').init_host()
    conf.set_override('nvme_cli', shutil.which('false'), group='nvme')
    with pytest.raises(exception.InvalidConfiguration, match='does not run'):
        nvme.NvmeDriver(conf, 'h').init_host()


@pytest.mark.parametrize('printed,found', [
    # 2.14 prints create-ns's nsid in another form; 1.15 and 3.0 were never read
    ('nvme version 2.14 (git 2.14)\nlibnvme version 1.14 (git 1.14)\n', '2.14'),
    ('nvme version 1.15\n', '1.15'),
    ('nvme version 3.0-rc1 (git 3.0-rc1)\n', '3.0-rc1'),
    ('nvme version 2.11.15.g0123abcd (git 2.11.15.g0123abcd)\n', '2.11.15.g0123abcd'),
    ('something else\n', 'unknown'),
])
def test_init_host_refuses_an_nvme_cli_it_does_not_read(sim, conf, tmp_path, printed,
                                                        found):
    # What `nvme version` of that release prints is all the check reads; a script
    # printing it stands in for a binary this machine does not have.
    other = tmp_path / 'nvme-other'
    other.write_text(f'#!/bin/sh\nprintf %s {shlex.quote(printed)}\n')
    other.chmod(0o755)
    conf.set_override('nvme_cli', str(other), group='nvme')
    with pytest.raises(exception.NvmeCliUnsupported) as err:
        nvme.NvmeDriver(conf, 'h').init_host()
    assert err.value.code == 'cyb.nvme.cli_unsupported'
    text = str(err.value)
    assert '\n' not in text
    assert f'nvme-cli {found} ' in text and str(other) in text
    assert 'supported: 1.16, 2.3, ' in text and '2.13' in text


def test_init_host_accepts_the_nvme_cli_of_this_machine(sim, conf):
    nvme.NvmeDriver(conf, 'h').init_host()          # Debian 12's 2.3, or the one given


def test_no_devices_is_not_an_error(sim, conf):
    assert _driver(conf).discover() == []


def test_a_controller_passed_to_a_guest_keeps_its_last_identity(sim, conf):
    """While bound to vfio-pci there is no /dev/nvmeN: the driver reports what it
    read last; after an agent restart it cannot know, and excludes the device."""
    ctrl = sim.add_controller()
    driver = _driver(conf)
    [before] = driver.discover()
    pci = os.path.join(sim.sysfs_root, 'bus', 'pci', 'devices', ctrl.address)
    os.rename(os.path.join(pci, 'nvme'), os.path.join(pci, 'nvme.away'))
    [during] = driver.discover()
    assert during.std_board_info == before.std_board_info
    assert during.deployable_list[0].traits == before.deployable_list[0].traits
    [fresh] = _driver(conf).discover()
    board = json.loads(fresh.std_board_info)
    assert board['cleanup_action'] is None and 'unknown' in board['cleanup']['excluded']
    with pytest.raises(exception.ControllerMissing, match='not bound'):
        _clean(driver, before)


def test_sr_iov_vfs_are_not_managed(sim, conf):
    sim.add_controller(address='0000:0a:00.0')
    sysfs_tree.make_pci(pathlib.Path(sim.sysfs_root), '0000:0a:00.1',
                        '0x8086', '0x0a54', cls='0x010802', physfn='0000:0a:00.0')
    assert [json.loads(d.std_board_info)['pci_address'] for d in _driver(conf).discover()] \
        == ['0000:0a:00.0']


def test_sanitize_in_progress_is_waited_for_not_doubled(sim, conf):
    ctrl = sim.add_controller(sanitize_seconds=0.6)
    driver = _driver(conf)
    [dev] = driver.discover()
    assert sim.nvme('sanitize', ctrl.char_path, '-a', '2').returncode == 0   # someone's
    rec = _clean(driver, dev)
    sanitizes = [c for c in ctrl.commands() if c.get('opcode') == 0x84]
    assert [c['cdw10'] & 7 for c in sanitizes] == [2, 4]
    assert sanitizes[1]['t'] >= sanitizes[0]['t'] + 500      # ours after it finished
    assert rec['sanitize_before'].startswith('sanitize still in progress')
    assert rec['verification'] == 'passed'


def test_a_busy_namespace_is_not_erased(sim, conf):
    ctrl = sim.add_controller()
    driver = _driver(conf)
    [dev] = driver.discover()
    ns = nvme_sysfs.controller_for(sim.sysfs_root, sim.dev_root, ctrl.address).namespaces()[0]
    open(os.path.join(ns.sysfs, 'holders', 'dm-3'), 'w').close()
    with pytest.raises(exception.PrecheckFailed, match='held by'):
        _clean(driver, dev)
    assert not [c for c in ctrl.commands() if c.get('opcode') == 0x84]


def test_a_watermark_that_survives_fails_the_cleanup(sim, conf):
    """A drive that lies (reports success, erased nothing) is caught by read-back."""
    ctrl = sim.add_controller()
    ref = nvme_sysfs.controller_for(sim.sysfs_root, sim.dev_root, ctrl.address)
    job = cleanup_job.CleanupJob('dev-1')
    cleaner = nvme_cleanup.Cleaner(nvme_cli.NvmeCli(sim.nvme_cli), ref, job, 'dev-1')
    marks = cleaner.write_marks()
    with pytest.raises(exception.VerifyFailed, match='watermark survived'):
        cleaner.verify(marks, expect_zero=False)
    assert job.record['verification'] == 'failed'
    blockio.zero_fill(ref.namespaces()[0].path)
    cleaner.verify(marks, expect_zero=True)
    assert job.record['verification'] == 'passed'


def test_zero_path_without_namespace_management_zeroes_each_namespace(sim, conf):
    ctrl = sim.add_controller(namespaces=[8 * MiB, 4 * MiB], ces=False, bes=False,
                              wzs=False, ns_mgmt=False, format_nvm=False)
    for ns in (1, 2):
        ctrl.write(MiB, b'x' * 4096, nsid=ns)
    driver = _driver(conf)
    [dev] = driver.discover()
    rec = _clean(driver, dev)
    assert [ns['size'] for ns in ctrl.namespaces()] == [8 * MiB, 4 * MiB]
    assert rec['bytes_zeroed'] == 12 * MiB and rec['assurance_level'] == 'clear-overwrite'
    assert all(open(p, 'rb').read() == bytes(os.path.getsize(p))
               for p in ctrl.backing_files())


@pytest.mark.parametrize('fna,ses,sent,scope', [
    # FNA 0: a format touches only the namespace named: each one in turn
    (0x0, 1, [1, 2], 'each namespace (1, 2)'),
    # FNA bit 0: a format applies to all namespaces: one command, NSID FFFFFFFFh
    (0x1, 1, [0xffffffff], 'NSID FFFFFFFFh: every namespace (FNA bit 0)'),
    # FNA bit 1: a crypto erase of one namespace erases all (their formats stay)
    (0x6, 2, [1], 'namespace 1, whose crypto erase FNA bit 1 applies to all'),
    (0x4, 2, [1, 2], 'each namespace (1, 2)'),
])
def test_format_path_sends_format_nvm_to_the_scope_fna_gives(sim, conf, fna, ses, sent,
                                                            scope):
    """NVMe 2.0 §5.14 and Identify Controller FNA: without namespace management the
    namespaces are as found (two here, one in 4 KiB blocks); every one is erased,
    with as few commands as FNA allows and each one's LBA format kept."""
    ctrl = sim.add_controller(namespaces=[8 * MiB, 4 * MiB], ces=False, bes=False,
                              wzs=True, ns_mgmt=False, fna=fna)
    r = sim.nvme('format', ctrl.char_path, '-n', '2', '--ses=0', '-l', '1', '--force')
    assert r.returncode == 0, r.stderr
    for ns in (1, 2):
        ctrl.write(MiB, b'tenant' * 700, nsid=ns)
    driver = _driver(conf)
    [dev] = driver.discover()
    board = json.loads(dev.std_board_info)
    assert board['cleanup_action'] == ('format_crypto' if ses == 2 else 'format_user_data')
    before = len(ctrl.commands())
    rec = _clean(driver, dev)
    formats = [c for c in ctrl.commands()[before:] if c.get('queue') == 'admin'
               and c['opcode'] == 0x80]
    assert [c['nsid'] for c in formats] == sent and all(c['status'] == 0 for c in formats)
    assert all((c['cdw10'] >> 9) & 7 == ses for c in formats)
    assert rec['format']['nsids'] == sent and rec['format']['scope'].startswith(scope)
    # (with FNA bit 0 the 4 KiB format of namespace 2 above formatted both)
    assert [ns['block_size'] for ns in ctrl.namespaces()] == \
        ([4096, 4096] if fna & 0x1 else [512, 4096])
    assert ctrl.find_on_media(b'tenant' * 700) == []
    assert rec['verification'] == 'passed'
    assert rec['capability_decision']['uses']['erase'].startswith(f'Format NVM SES {ses}')


def test_format_is_not_offered_where_nvme_cli_cannot_send_one(sim, conf):
    """FNA bits 0 and 3: nvme-cli 2.3 sends every format of an FNA bit 0 controller
    to NSID FFFFFFFFh, which FNA bit 3 refuses (0x400b): the policy goes on to
    write zeroes instead of locking in an action that would always fail."""
    ctrl = sim.add_controller(namespaces=[8 * MiB], ces=False, bes=False, ns_mgmt=False,
                              fna=0x9)
    r = sim.nvme('format', ctrl.char_path, '-n', '1', '--ses=1', '--force')
    assert r.returncode == 1 and '(0x400b)' in r.stderr
    assert ctrl.commands()[-1]['nsid'] == 0xffffffff
    [dev] = _driver(conf).discover()
    board = json.loads(dev.std_board_info)
    assert board['cleanup_action'] == 'write_zeroes'
    assert board['cleanup']['identify']['format_nvm']['usable_through_nvme_cli'] is False


def test_format_refused_by_the_controller_is_a_format_failure(sim, conf):
    ctrl = sim.add_controller(namespaces=[8 * MiB], ces=False, bes=False, ns_mgmt=False)
    driver = _driver(conf)
    [dev] = driver.discover()
    ctrl.inject(0x80, 0x4286, queue='admin')                # Access Denied (SED locked)
    with pytest.raises(exception.FormatFailed, match='0x4286'):
        _clean(driver, dev)


def test_cleanup_without_a_locked_action_is_refused(sim, conf):
    with pytest.raises(exception.CleanupUnsupported, match='not locked|nothing'):
        nvme.NvmeDriver(conf, 'h').cleanup(
            {'uuid': 'd', 'std_board_info': json.dumps(
                {'cleanup_action': None, 'cleanup': {'reason': 'nothing fits'}})})


@pytest.mark.parametrize('preset,said', [
    ('client_format', 'no sanitize on this controller (SANICAP 0x0)'),
    ('block_erase', 'never sanitized')])
def test_what_an_interrupted_cleanup_left_is_asked_only_where_it_can_be(sim, conf,
                                                                      preset, said):
    """At agent start, a cleanup the agent did not see finish is described from the
    sanitize log, on a controller that has one; on one without sanitize, reading it
    would only get Invalid Log Page (issue 21)."""
    ctrl = sim.add_controller(preset=preset, namespaces=[4 * MiB])
    driver = _driver(conf)
    [dev] = driver.discover()
    text = driver.describe_interrupted({'uuid': 'dev-1',
                                        'std_board_info': dev.std_board_info})
    assert said in text, text
    assert [c for c in ctrl.commands() if c['queue'] == 'admin' and c['status']] == []
    if preset == 'client_format':               # the Format NVM path (issue 21)
        assert text.startswith('Format NVM (format_crypto) was cut short'), text

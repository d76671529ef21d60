"""Parsing what nvme-cli prints: 2.3 as shipped (real output, see nvme_fixtures/README.md)
and the >= 2.4 shapes; turning stderr into errors with stable codes."""
import json
import os

import pytest

from steward.common import exception
from steward.drivers.nvme import cli as nvme_cli
from tests.fixtures import requirements

FIXTURES = os.path.join(os.path.dirname(__file__), 'nvme_fixtures')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def test_id_ctrl_2_3_strips_padding_and_reads_capability_bits():
    c = nvme_cli.parse_id_ctrl(fixture('id-ctrl-2.3.json'))
    assert (c.serial, c.model, c.firmware) == ('FAKESN0001', 'Fake NVMe Ctrl', '1.0')
    assert c.vid == 0x1b36
    assert c.tnvmcap == 1073741824              # a decimal string in 2.3
    assert c.sanicap == 0x60000003
    # oacs 0x12a has bit 3 (namespace management), oncs 0x15d has bit 3 (write zeroes)
    assert c.capabilities() == {'ces': True, 'bes': True, 'wzs': True, 'ns_mgmt': True,
                                'format_erase': True, 'format_crypto': True}


def test_id_ctrl_2_3_signed_sanicap_is_read_unsigned():
    text = fixture('id-ctrl-2.3-signed-sanicap.json')
    assert '"sanicap":-1610612729' in text      # the 2.3 bug, as printed
    c = nvme_cli.parse_id_ctrl(text)
    assert c.sanicap == 0xa0000007
    assert (c.ces, c.bes, c.ows) == (True, True, True)


def test_id_ctrl_without_sanitize():
    c = nvme_cli.parse_id_ctrl(fixture('id-ctrl-2.3-no-sanitize.json'))
    assert (c.ces, c.bes, c.wzs) == (False, False, True)


def test_id_ctrl_2_4_shape_gives_the_same_answer():
    old = nvme_cli.parse_id_ctrl(fixture('id-ctrl-2.3-signed-sanicap.json'))
    new = nvme_cli.parse_id_ctrl(fixture('id-ctrl-2.4-style.json'))
    assert old == new


@pytest.mark.parametrize('name', ['id-ns-2.3.json', 'id-ns-2.4-style.json'])
def test_id_ns(name):
    ns = nvme_cli.parse_id_ns(fixture(name), 1)
    assert (ns.nsze, ns.flbas, ns.lba_size) == (2097152, 0, 512)
    assert ns.size_bytes == 1073741824


def test_id_ns_lba_format_index_includes_the_high_bits():
    text = '{"nsze": 8, "flbas": 1, "lbafs": [{"ds": 9}, {"ds": 12}]}'
    assert nvme_cli.parse_id_ns(text, 1).lba_size == 4096


def test_list_ns():
    assert nvme_cli.parse_list_ns(fixture('list-ns-2.3.json')) == [1, 2]
    assert nvme_cli.parse_list_ns('{"nsid_list":[]}') == []


@pytest.mark.parametrize('sstat,in_progress,succeeded,failed', [
    (0, False, False, False), (1, False, True, False), (2, True, False, False),
    (3, False, False, True), (4, False, True, False)])
def test_sanitize_log_2_3_every_sstat(sstat, in_progress, succeeded, failed):
    s = nvme_cli.parse_sanitize_log(fixture(f'sanitize-log-2.3-sstat{sstat}.json'), 'nvme0')
    assert s.sstat == sstat
    assert (s.in_progress, s.succeeded, s.failed) == (in_progress, succeeded, failed)
    assert s.sanact == nvme_cli.SANACT_CRYPTO
    assert s.estimates == {'crypto': 10, 'block': 60, 'overwrite': None}    # -1: not reported


def test_sanitize_log_progress_and_description():
    s = nvme_cli.parse_sanitize_log(fixture('sanitize-log-2.3-sstat2.json'), 'nvme0')
    assert s.sprog == 28180
    assert s.percent == 43.0
    assert s.describe() == 'sanitize still in progress 43 % (crypto-erase)'


def test_sanitize_log_keyed_by_another_name_and_flat_2_4():
    keyed = nvme_cli.parse_sanitize_log(fixture('sanitize-log-2.3-sstat2.json'), 'nvme7')
    flat = nvme_cli.parse_sanitize_log(fixture('sanitize-log-2.4-style-flat-sstat2.json'))
    assert keyed == flat
    assert flat.estimates['overwrite'] is None              # 4294967295: not reported


def test_sanitize_log_sstat_as_a_number():
    s = nvme_cli.parse_sanitize_log('{"sprog": 65535, "sstat": 259, "scdw10": 2}')
    assert (s.sstat, s.global_erased, s.sanact) == (3, True, 2)


@pytest.mark.parametrize('text', ['', 'not json', '{"nvme0": {"sprog": 1}}', '[]'])
def test_sanitize_log_garbage_is_a_clear_error(text):
    with pytest.raises(exception.NvmeBadOutput) as err:
        nvme_cli.parse_sanitize_log(text, 'nvme0')
    assert err.value.code == 'cyb.nvme.bad_output'


@pytest.mark.parametrize('stderr,cls,status', [
    ('NVMe status: Sanitize In Progress: The requested function is prohibited while a '
     'sanitize operation is in progress(0x1d)\n', exception.NvmeSanitizeInProgress, 0x1d),
    ('NVMe status: Access Denied: Access to the namespace and/or LBA range is denied due '
     'to lack of access rights(0x4286)\n', exception.NvmeAccessDenied, 0x4286),
    ('NVMe status: Invalid Command Opcode: A reserved coded value or an unsupported value '
     'in the command opcode field(0x4001)\n', exception.NvmeInvalidOpcode, 0x4001),
    ('NVMe status: unrecognized(0x20a)\n', exception.NvmeCommandFailed, 0x20a),
])
def test_nvme_status_on_stderr_maps_to_a_distinct_error(stderr, cls, status):
    err = nvme_cli.error_from_stderr('sanitize /dev/nvme0 -a 4', stderr)
    assert type(err) is cls and err.status == status
    assert f'0x{status:x}' in str(err)


def test_os_error_on_stderr():
    err = nvme_cli.error_from_stderr('id-ctrl /dev/nvme9',
                                     '/dev/nvme9: No such file or directory\nUsage: ...\n')
    assert type(err) is exception.NvmeCommandFailed and err.status is None
    assert 'No such file or directory' in str(err)


def test_created_nsid_and_version():
    assert nvme_cli.parse_created_nsid('create-ns: Success, created nsid:3\n') == 3
    assert nvme_cli.parse_version('nvme version 2.3 (git 2.3)\nlibnvme version 1.3') == '2.3'
    with pytest.raises(exception.NvmeBadOutput):
        nvme_cli.parse_created_nsid('')


# --- the real binary ----------------------------------------------------------------
def test_real_nvme_cli_failure_is_parsed(tmp_path, conf):
    conf.set_override('dev_root', str(tmp_path))      # the privsep daemon's check
    cli = nvme_cli.NvmeCli('nvme')
    if cli.path() is None:
        requirements.need('nvme', 'nvme-cli is not installed')
    if os.geteuid() != 0:
        # nvme-cli runs in the nvme_admin privsep daemon, which an unprivileged
        # user (tox as a contributor) could start only through sudo.
        requirements.need('root', 'runs nvme-cli in its privsep daemon')
    with pytest.raises(exception.NvmeCommandFailed) as err:
        cli.id_ctrl(str(tmp_path / 'nvme9'))
    assert 'No such file or directory' in str(err.value)
    assert cli.version()


def test_missing_binary_is_a_configuration_error(tmp_path):
    cli = nvme_cli.NvmeCli(str(tmp_path / 'no-nvme'))
    assert cli.path() is None
    with pytest.raises(exception.NvmeCliMissing) as err:
        cli.version()
    assert err.value.code == 'cyb.nvme.cli_missing'


def test_write_zeroes_refuses_more_than_65536_blocks():
    with pytest.raises(ValueError):
        nvme_cli.NvmeCli('nvme').write_zeroes('/dev/nvme0n1', 1, 0, 65537)


def test_id_ctrl_reads_unallocated_capacity_and_subsystem_nqn():
    c = nvme_cli.parse_id_ctrl(fixture('id-ctrl-2.3.json'))
    assert c.unvmcap == 0
    assert c.subnqn == 'nqn.2019-08.org.qemu:fakesn0001'


def test_formats_are_the_lba_formats_nlbaf_counts():
    formats = nvme_cli.parse_formats(fixture('id-ns-2.3.json'))
    assert formats == [nvme_cli.LbaFormat(0, 512, 0), nvme_cli.LbaFormat(1, 4096, 0)]
    # nvme-cli prints every slot; only the first NLBAF + 1 are formats.
    padded = json.loads(fixture('id-ns-2.3.json'))
    padded['nlbaf'] = 0
    padded['lbafs'].append({'ms': 8, 'ds': 12, 'rp': 0})
    assert nvme_cli.parse_formats(json.dumps(padded)) == [nvme_cli.LbaFormat(0, 512, 0)]
    with pytest.raises(exception.NvmeBadOutput):
        nvme_cli.parse_formats('{"nlbaf": 1, "lbafs": [{"ms": 0}]}')

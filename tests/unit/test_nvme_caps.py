"""The capability profile read from nvme-cli's Identify output (nvme_fixtures: real
nvme-cli 2.3 output and the >= 2.4 shape), and what it says a controller supports."""
import pytest

from steward.drivers.nvme import caps as nvme_caps
from steward.drivers.nvme import cli as nvme_cli
from tests.unit.test_nvme_cli import fixture


def _profile(name):
    return nvme_caps.profile(nvme_cli.parse_id_ctrl(fixture(name)))


@pytest.mark.parametrize('name', ['id-ctrl-2.3.json', 'id-ctrl-2.4-style.json',
                                  'id-ctrl-2.3-signed-sanicap.json'])
def test_a_sanitizing_controller(name):
    p = _profile(name)
    assert (p.ver, p.lpa, p.mdts) == (0x10400, 0x7, 7)
    assert p.sanitize and p.sanitize_crypto and p.sanitize_block
    d = p.as_dict()
    assert d['nvme_version'] == '1.4'
    assert d['sanitize']['status_log_0x81'] is True
    assert 0x81 in d['logs'] and 0x05 in d['logs']
    # OACS 0x12a: Format (bit 1), Namespace Management (bit 3); ONCS 0x15d: DSM,
    # Write Zeroes, not Verify (bit 7 clear)
    assert d['namespace_management'] and d['format_nvm']['supported']
    assert d['write_zeroes'] and d['dataset_management'] and not d['verify']
    assert d['identify_cns'] == [0x00, 0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x13]
    assert d['format_nvm']['crypto_erase'] and not d['format_nvm']['all_namespaces']
    assert d['max_transfer_bytes'] == 4096 << 7


def test_a_controller_without_sanitize_has_no_sanitize_log():
    p = _profile('id-ctrl-2.3-no-sanitize.json')
    assert not p.sanitize
    d = p.as_dict()
    assert d['sanitize'] == {'crypto': False, 'block': False, 'overwrite': False,
                             'no_deallocate_inhibited': False, 'status_log_0x81': False}
    assert 0x81 not in d['logs']


@pytest.mark.parametrize('ver,text,cns', [
    (0, '1.0 (VER not reported)', [0x00, 0x01]),
    (0x10100, '1.1', [0x00, 0x01, 0x02]),
    (0x10201, '1.2.1', [0x00, 0x01, 0x02]),
    (0x20000, '2.0', [0x00, 0x01, 0x02, 0x03])])
def test_identify_cns_values_follow_the_version(ver, text, cns):
    p = nvme_caps.Profile(ver=ver, oacs=0, oncs=0, sanicap=0, fna=0, lpa=0, mdts=0)
    assert nvme_caps.version_text(ver) == text
    assert p.as_dict()['identify_cns'] == cns
    assert p.as_dict()['max_transfer_bytes'] is None          # MDTS 0: no limit


def test_dlfeat():
    assert nvme_caps.dlfeat_dict(0x9) == {'dlfeat': '0x9', 'deallocated_reads': 'zeroes',
                                          'write_zeroes_deallocates': True}
    assert nvme_caps.dlfeat_dict(0)['deallocated_reads'] == 'not reported'
    ns = nvme_cli.parse_id_ns(fixture('id-ns-2.3.json'), 1)
    assert ns.dlfeat == 9

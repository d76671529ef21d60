"""Every nvme-cli version's output, read by the driver's parsers (issue 53, item 1).

The outputs are what real binaries printed over the simulated controllers
(nvme_cli_outputs/README.md says which binary each folder came from, record.py what
was on the drives). Each case must parse to what the drive held, in every version:
a parser that reads one version's shape and misreads another's (2.11's
critical_warning object, 2.8's sstat keyed by its own text) fails here.
"""
import json
import os

import pytest

from steward.common import exception
from steward.drivers.nvme import cli as nvme_cli
from steward.drivers.nvme import health as nvme_health
from steward.drivers.nvme import versions as nvme_versions

HERE = os.path.join(os.path.dirname(__file__), 'nvme_cli_outputs')
FOLDERS = sorted(d for d in os.listdir(HERE) if os.path.isfile(os.path.join(HERE, d,
                                                                            'cases.json')))
MiB = 2 ** 20


def stdout(folder, case):
    with open(os.path.join(HERE, folder, f'{case}.stdout')) as f:
        return f.read()


def cases(folder):
    with open(os.path.join(HERE, folder, 'cases.json')) as f:
        return json.load(f)


def version_of(folder):
    return cases(folder)['version']


def json_errors(folder):
    """How a JSON command's error is told: on stderr with its number (None), on
    stdout as JSON with its number ('number': 2.5, 2.6) or without ('text': 2.7 on)."""
    major, minor = (int(p) for p in version_of(folder).split('.')[:2])
    if (major, minor) < (2, 5):
        return None
    return 'number' if (major, minor) < (2, 7) else 'text'


def test_every_version_the_issue_names_was_recorded():
    assert {version_of(f) for f in FOLDERS} >= {'1.16', '2.3', '2.8', '2.9', '2.11',
                                                '2.12', '2.13'}


def test_the_agent_accepts_exactly_the_recorded_versions():
    # versions.py's RECORDED is the folders here: a version is let in by its output.
    assert set(nvme_versions.RECORDED) == {version_of(f) for f in FOLDERS}
    for version in nvme_versions.SUPPORTED:
        assert nvme_versions.check(version, 'nvme') == version
    for version in ('1.15', '2.2', '2.14', '3.0', '2.13.1', '2.11.15.g0123abcd', None):
        with pytest.raises(exception.NvmeCliUnsupported):
            nvme_versions.check(version, 'nvme')


@pytest.mark.parametrize('folder', FOLDERS)
def test_version(folder):
    assert nvme_cli.parse_version(stdout(folder, 'version')) == version_of(folder)
    assert folder.split('-')[0] == version_of(folder)


@pytest.mark.parametrize('folder', FOLDERS)
def test_id_ctrl(folder):
    c = nvme_cli.parse_id_ctrl(stdout(folder, 'id-ctrl'))
    assert c == nvme_cli.Controller(
        vid=0x8086, serial='RECSN0001', model='SAMSUNG MZWLJ7T6HALA-00AU3',
        firmware='1.0', cntlid=0, oacs=0x0a, oncs=0x0c,
        # bits 31 and 29: 2.3 prints this one negative
        sanicap=0xa0000003, fna=0x4, nn=32, tnvmcap=16 * MiB, unvmcap=4 * MiB,
        subnqn='nqn.2024-01.org.steward.nvme-sim:RECSN0001', ver=0x10300, lpa=0x6,
        mdts=8)
    assert c.capabilities() == {'ces': True, 'bes': True, 'wzs': True, 'ns_mgmt': True,
                                'format_erase': True, 'format_crypto': True}
    none = nvme_cli.parse_id_ctrl(stdout(folder, 'id-ctrl-no-sanitize'))
    assert (none.serial, none.sanicap, none.ces, none.bes, none.unvmcap) == (
        'RECSN0002', 0, False, False, 0)


@pytest.mark.parametrize('folder', FOLDERS)
def test_id_ns_and_formats(folder):
    # 1.x prints no DLFEAT: unknown, not "0" (no promise about deallocated reads).
    dlfeat = None if folder.startswith('1.') else 0x9
    assert nvme_cli.parse_id_ns(stdout(folder, 'id-ns'), 2) == nvme_cli.Namespace(
        nsid=2, nsze=16384, ncap=16384, flbas=0, lba_size=512, dlfeat=dlfeat)
    assert nvme_cli.parse_id_ns(stdout(folder, 'id-ns-4k'), 1) == nvme_cli.Namespace(
        nsid=1, nsze=2048, ncap=2048, flbas=1, lba_size=4096, dlfeat=dlfeat)
    assert [(f.index, f.lba_size, f.metadata) for f in
            nvme_cli.parse_formats(stdout(folder, 'id-ns-all'))] == [(0, 512, 0),
                                                                   (1, 4096, 0)]


@pytest.mark.parametrize('folder', FOLDERS)
def test_namespace_lists_and_create(folder):
    assert nvme_cli.parse_list_ns(stdout(folder, 'list-ns')) == [1, 2]
    assert nvme_cli.parse_list_ns(stdout(folder, 'list-ns-active')) == [1]
    assert nvme_cli.parse_list_ns(stdout(folder, 'list-ns-allocated')) == [1, 2]
    assert nvme_cli.parse_created_nsid(stdout(folder, 'create-ns')) == 2
    for case in ('detach-ns', 'delete-ns', 'create-ns', 'sanitize', 'sanitize-block'):
        assert cases(folder)['cases'][case]['rc'] == 0, case


@pytest.mark.parametrize('folder', FOLDERS)
@pytest.mark.parametrize('case,device,sstat,sprog,sanact,erased', [
    ('sanitize-log-never', 'nvme0', nvme_cli.SSTAT_NEVER, 0xffff, 0, True),
    # hung at 43 %: SPROG = 0.43 x 65536
    ('sanitize-log-in-progress', 'nvme0', nvme_cli.SSTAT_IN_PROGRESS, 28180, 4, True),
    ('sanitize-log-success', 'nvme0', nvme_cli.SSTAT_SUCCESS, 0xffff, 4, True),
    ('sanitize-log-failed', 'nvme2', nvme_cli.SSTAT_FAILED, 0xffff, 2, False),
])
def test_sanitize_log(folder, case, device, sstat, sprog, sanact, erased):
    s = nvme_cli.parse_sanitize_log(stdout(folder, case), device)
    assert (s.sstat, s.sprog, s.sanact, s.global_erased) == (sstat, sprog, sanact, erased)
    assert s.estimates['overwrite'] is None             # 0xffffffff: not reported
    assert s.estimates['block'] == 1


@pytest.mark.parametrize('folder', FOLDERS)
@pytest.mark.parametrize('case,warning,temperature,spare,used,media,entries', [
    ('smart-log-new', 0, 310, 100, 0, 0, 0),
    ('smart-log-read-only', 0x08, 310, 100, 0, 0, 0),
    ('smart-log-spare-low', 0x01, 310, 5, 0, 0, 0),
    ('smart-log-counters', 0, 300, 100, 42, 2 ** 40 + 5, 3),
    ('smart-log-many-bits', 0x3e, 350, 100, 42, 2 ** 40 + 5, 3),
])
def test_smart_log(folder, case, warning, temperature, spare, used, media, entries):
    log = nvme_health.parse_smart_log(stdout(folder, case))
    assert log == nvme_health.SmartLog(
        critical_warning=warning, temperature_k=temperature, available_spare=spare,
        spare_threshold=10, percent_used=used, media_errors=media,
        error_log_entries=entries)


@pytest.mark.parametrize('folder', FOLDERS)
def test_a_read_only_drive_is_unhealthy_in_every_version(folder, conf):
    for case, codes in (('smart-log-read-only', {'nvme.critical_warning.read_only'}),
                        ('smart-log-spare-low', {'nvme.critical_warning.spare',
                                                 'nvme.spare_below_threshold'})):
        found = nvme_health.conditions(
            nvme_health.parse_smart_log(stdout(folder, case)), conf)
        assert {c.code for c in found} == codes
        assert {c.severity for c in found} == {'unhealthy'}


@pytest.mark.parametrize('folder', FOLDERS)
def test_the_recorded_shapes_are_the_ones_the_docs_name(folder):
    # What health.py and cli.py's docstrings say of each version, checked on the
    # real output: should a re-recording disagree, the docs are wrong.
    version = version_of(folder)
    warning = json.loads(stdout(folder, 'smart-log-read-only'))['critical_warning']
    assert isinstance(warning, dict) == (version in ('2.11', '2.12'))
    if isinstance(warning, dict):
        assert warning['value'] == 8 and warning['ro'] == 1
    sstat = next(iter(json.loads(stdout(folder, 'sanitize-log-in-progress')).values()))[
        'sstat']
    assert ('status' in sstat) == (version.split('.')[:2] not in (['2', '7'], ['2', '8']))
    tnvmcap = json.loads(stdout(folder, 'id-ctrl'))['tnvmcap']
    assert isinstance(tnvmcap, str) == (version == '2.3')


@pytest.mark.parametrize('folder', FOLDERS)
@pytest.mark.parametrize('case,cls,status', [
    ('sanitize-while-in-progress', exception.NvmeSanitizeInProgress, 0x1d),
    ('sanitize-log-unsupported', exception.NvmeCommandFailed, 0x4109),
    ('id-ctrl-access-denied', exception.NvmeAccessDenied, 0x4286),
    ('id-ctrl-sanitize-in-progress', exception.NvmeSanitizeInProgress, 0x1d),
    ('id-ctrl-no-device', exception.NvmeCommandFailed, None),
])
def test_failures(folder, case, cls, status):
    recorded = cases(folder)['cases'][case]
    assert recorded['rc'] != 0
    err = nvme_cli.error_from_stderr(recorded['argv'], recorded['stderr'],
                                     stdout(folder, case))
    assert type(err) is cls
    if case == 'id-ctrl-no-device':
        assert 'No such file or directory' in str(err)
    elif json_errors(folder) == 'text' and case != 'sanitize-while-in-progress':
        # sanitize takes no -o json: its status stays on stderr, with its number
        assert err.status is None and 'NVMe status' not in str(err)
    else:
        assert err.status & 0x7ff == status & 0x7ff
        assert f'0x{err.status:x}' in str(err)

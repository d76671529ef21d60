"""An NVMe drive's health (issue 38): the simulator's SMART / Health Information
log page (Get Log Page 02h) byte for byte as NVMe Base 2.0 Figure 207 lays it out,
read through the real nvme-cli and judged by steward/drivers/nvme/health.py."""
import os
import struct

import pytest

from steward.common import health
from steward.drivers.nvme import cli as nvme_cli
from steward.drivers.nvme import health as nvme_health
from tests.fixtures import requirements
from tests.nvme_sim import SimError, Simulation


@pytest.fixture
def sim(tmp_path):
    with Simulation(tmp_path) as s:
        yield s


@pytest.fixture
def ctrl(sim):
    return sim.add_controller(address='0000:0a:00.0', namespaces=[4 * 2**20])


def raw_page(sim, ctrl):
    """The 512-byte page as the controller returned it (nvme get-log -b)."""
    out = sim.nvme('get-log', ctrl.char_path, '--log-id=2', '--log-len=512',
                   '--raw-binary')
    assert out.returncode == 0, out.stderr
    return out.stdout.encode('latin-1') if isinstance(out.stdout, str) else out.stdout


def reading(sim, ctrl, conf):
    text = sim.nvme('smart-log', ctrl.char_path, '-o', 'json')
    assert text.returncode == 0, text.stderr
    log = nvme_health.parse_smart_log(text.stdout)
    return log, nvme_health.conditions(log, conf)


def codes(conditions):
    return {(c.code, c.severity) for c in conditions}


def test_a_new_drive_reports_nothing_wrong(sim, ctrl, conf):
    log, found = reading(sim, ctrl, conf)
    assert (log.critical_warning, log.available_spare, log.spare_threshold,
            log.percent_used, log.media_errors) == (0, 100, 10, 0, 0)
    assert found == []
    assert health.worst(found) == health.HEALTH_OK


def test_the_page_is_laid_out_as_figure_207(sim, ctrl):
    ctrl.set_health(available_spare=7, spare_threshold=9, percent_used=42,
                    temperature_k=300, media_errors=2**40 + 5, error_log_entries=3,
                    warning_temp_minutes=11, critical_temp_minutes=2)
    page = raw_page(sim, ctrl)
    assert len(page) == 512
    assert page[0] == 0x01                          # bit 0: spare below threshold
    assert struct.unpack_from('<H', page, 1)[0] == 300       # bytes 2:1, Kelvin
    assert (page[3], page[4], page[5]) == (7, 9, 42)
    assert int.from_bytes(page[160:176], 'little') == 2**40 + 5
    assert int.from_bytes(page[176:192], 'little') == 3
    assert struct.unpack_from('<II', page, 192) == (11, 2)


def test_spare_below_threshold_sets_bit_0_and_is_unhealthy(sim, ctrl, conf):
    ctrl.set_health(available_spare=5)
    log, found = reading(sim, ctrl, conf)
    assert log.critical_warning == 0x01
    assert codes(found) == {('nvme.critical_warning.spare', 'unhealthy'),
                            ('nvme.spare_below_threshold', 'unhealthy')}


def test_over_wctemp_sets_bit_1(sim, ctrl, conf):
    ctrl.set_health(temperature_k=342)
    assert reading(sim, ctrl, conf)[1] == []
    ctrl.set_health(temperature_k=343)             # WCTEMP of id-ctrl
    assert codes(reading(sim, ctrl, conf)[1]) == {
        ('nvme.critical_warning.temperature', 'unhealthy')}


@pytest.mark.parametrize('bit,code', [
    (0x04, 'nvme.critical_warning.reliability'),
    (0x08, 'nvme.critical_warning.read_only'),
    (0x10, 'nvme.critical_warning.volatile_backup'),
    (0x20, 'nvme.critical_warning.pmr_read_only')])
def test_each_other_critical_warning_bit(sim, ctrl, conf, bit, code):
    ctrl.set_health(extra_warning=bit)
    log, found = reading(sim, ctrl, conf)
    assert log.critical_warning == bit
    assert codes(found) == {(code, 'unhealthy')}


def test_critical_warnings_can_be_made_warnings_by_the_operator(sim, ctrl, conf):
    conf.set_override('nvme_critical_warning_unhealthy', False, group='health')
    ctrl.set_health(extra_warning=0x08)
    assert codes(reading(sim, ctrl, conf)[1]) == {
        ('nvme.critical_warning.read_only', 'warning')}


def test_percentage_used_is_a_warning_at_its_threshold(sim, ctrl, conf):
    ctrl.set_health(percent_used=89)
    assert reading(sim, ctrl, conf)[1] == []
    ctrl.set_health(percent_used=90)
    assert codes(reading(sim, ctrl, conf)[1]) == {('nvme.percentage_used', 'warning')}
    conf.set_override('nvme_percentage_used_warning', 95, group='health')
    assert reading(sim, ctrl, conf)[1] == []


def test_media_errors_warn_then_fail_at_the_configured_count(sim, ctrl, conf):
    ctrl.set_health(media_errors=3)
    assert codes(reading(sim, ctrl, conf)[1]) == {('nvme.media_errors', 'warning')}
    conf.set_override('nvme_media_errors_unhealthy', 3, group='health')
    assert codes(reading(sim, ctrl, conf)[1]) == {('nvme.media_errors', 'unhealthy')}


def test_conditions_change_over_time_and_clear(sim, ctrl, conf):
    ctrl.set_health(available_spare=5)
    assert health.worst(reading(sim, ctrl, conf)[1]) == health.HEALTH_UNHEALTHY
    ctrl.set_health(available_spare=100)           # the drive was replaced
    assert reading(sim, ctrl, conf)[1] == []


def test_a_lying_drive_reports_a_new_drive(sim, ctrl, conf):
    ctrl.set_health(available_spare=1, extra_warning=0x08, media_errors=9, lie=True)
    assert reading(sim, ctrl, conf)[1] == []
    ctrl.set_health(lie=False)
    assert health.worst(reading(sim, ctrl, conf)[1]) == health.HEALTH_UNHEALTHY


def _privsep_daemon_can_start():
    """The cli runs nvme-cli in its nvme_admin privsep daemon, which a user
    without root (tox as a contributor) could start only through sudo."""
    if os.geteuid() != 0:
        requirements.need('root', 'runs nvme-cli in its privsep daemon')


def test_the_driver_reads_through_its_cli(sim, ctrl, conf, monkeypatch):
    _privsep_daemon_can_start()
    for key, value in sim.env.items():
        monkeypatch.setenv(key, value)
    # what the nvme_admin privsep daemon allows: this binary, nodes under dev_root
    conf.set_override('nvme_cli', sim.nvme_cli, group='nvme')
    conf.set_override('dev_root', sim.dev_root)
    conf.set_override('sysfs_root', sim.sysfs_root)
    cli = nvme_cli.NvmeCli(sim.nvme_cli)
    ctrl.set_health(extra_warning=0x04)
    got = nvme_health.read(cli, ctrl.char_path, conf)
    assert got.state == health.HEALTH_UNHEALTHY, got
    assert [c.code for c in got.conditions] == ['nvme.critical_warning.reliability']
    assert got.read_at


def test_an_unreadable_log_is_a_warning_not_a_fault(sim, ctrl, conf, monkeypatch):
    _privsep_daemon_can_start()
    for key, value in sim.env.items():
        monkeypatch.setenv(key, value)
    # what the nvme_admin privsep daemon allows: this binary, nodes under dev_root
    conf.set_override('nvme_cli', sim.nvme_cli, group='nvme')
    conf.set_override('dev_root', sim.dev_root)
    conf.set_override('sysfs_root', sim.sysfs_root)
    ctrl.inject(0x02, 0x6, times=None, queue='admin')    # Internal Error
    got = nvme_health.read(nvme_cli.NvmeCli(sim.nvme_cli), ctrl.char_path, conf)
    assert [(c.code, c.severity) for c in got.conditions] == [
        ('nvme.smart_unreadable', 'warning')]


def test_the_simulator_refuses_impossible_values(ctrl):
    with pytest.raises(SimError):
        ctrl.set_health(available_spare=256)
    with pytest.raises(SimError):
        ctrl.set_health(wear=3)

"""Health of PCI functions (issue 38): the kernel's AER counters and the driver
binding in sysfs-shaped trees, read by the pci, mdev and nvidia_gpu drivers; the
nvidia_gpu driver's Xid lines; the fake driver told its health."""
import json
import os

import pytest

from steward.common import health
from steward.drivers import fake
from steward.drivers import nvidia_gpu
from steward.drivers.pci import driver as pci
from steward.drivers.pci import health as pci_health
from tests.fixtures import sysfs_tree
from tests.fixtures.sysfs_tree import make_pci, write_aer

ADDR = '0000:0a:00.0'


@pytest.fixture
def fn(tmp_path):
    root = tmp_path / 'sys'
    path = make_pci(root, ADDR, '0x8086', '0x0d58', driver='vfio-pci')
    write_aer(path)
    return root, path


def pci_driver(conf, root):
    conf.set_override('sysfs_root', str(root))
    conf.set_override('device_spec', ['{"vendor_id": "8086"}'], group='pci')
    return pci.PciDriver(conf, 'cmp1')


def reading(driver):
    (dev,) = driver.discover()
    return health.Reading.from_dict(dev.health)


def codes(r):
    return {(c.code, c.severity) for c in r.conditions}


def test_the_files_parse_as_the_kernel_writes_them(fn):
    _, path = fn
    write_aer(path, correctable={'Bad TLP': 2, 'RxErr': 1}, fatal={'Surprise Down Error': 1})
    aer = pci_health.read_aer(str(path))
    assert aer['correctable'][0] == 3
    assert aer['correctable'][1]['Bad TLP'] == 2          # a name with a space
    assert aer['fatal'] == (1, aer['fatal'][1]) and aer['fatal'][1]['Surprise Down Error'] == 1
    assert aer['nonfatal'][0] == 0


def test_the_kernel_total_wins_over_the_sum():
    # One ERR_COR message may report several errors: TOTAL_ERR_COR is what counts.
    counts, total = pci_health.parse_aer('RxErr 2\nBad TLP 2\nTOTAL_ERR_COR 3\n',
                                         'TOTAL_ERR_COR')
    assert (counts, total) == ({'RxErr': 2, 'Bad TLP': 2}, 3)


def test_a_clean_function_is_ok(conf, fn):
    root, _ = fn
    r = reading(pci_driver(conf, root))
    assert r.conditions == () and r.state == health.HEALTH_OK and r.read_at


def test_fatal_aer_errors_make_it_unhealthy(conf, fn):
    root, path = fn
    driver = pci_driver(conf, root)
    assert reading(driver).state == health.HEALTH_OK
    write_aer(path, fatal={'Completion Timeout': 1})
    r = reading(driver)
    assert codes(r) == {('pci.aer_fatal', 'unhealthy')}
    assert 'Completion Timeout 1' in r.conditions[0].detail
    conf.set_override('pci_aer_fatal_unhealthy', False, group='health')
    assert codes(reading(pci_driver(conf, root))) == {('pci.aer_fatal', 'warning')}


def test_nonfatal_errors_warn_unless_configured_unhealthy(conf, fn):
    root, path = fn
    write_aer(path, nonfatal={'Poisoned TLP': 2})
    assert codes(reading(pci_driver(conf, root))) == {('pci.aer_nonfatal', 'warning')}
    conf.set_override('pci_aer_nonfatal_unhealthy', True, group='health')
    assert codes(reading(pci_driver(conf, root))) == {('pci.aer_nonfatal', 'unhealthy')}


def test_correctable_errors_warn_when_they_rise(conf, fn):
    root, path = fn
    write_aer(path, correctable={'RxErr': 40})     # counted before the agent started
    conf.set_override('pci_correctable_warning', 5, group='health')
    driver = pci_driver(conf, root)
    assert reading(driver).conditions == ()
    write_aer(path, correctable={'RxErr': 44})
    assert reading(driver).conditions == ()
    write_aer(path, correctable={'RxErr': 45})
    assert codes(reading(driver)) == {('pci.aer_correctable', 'warning')}


def test_a_function_whose_driver_unbinds_warns(conf, fn):
    root, path = fn
    driver = pci_driver(conf, root)
    assert reading(driver).conditions == ()
    os.unlink(path / 'driver')
    assert codes(reading(driver)) == {('pci.driver_unbound', 'warning')}


def test_a_function_without_aer_reads_nothing(conf, tmp_path):
    root = tmp_path / 'sys'
    make_pci(root, ADDR, '0x8086', '0x0d58')
    assert reading(pci_driver(conf, root)).conditions == ()


def test_the_fixture_refuses_names_the_kernel_does_not_have(fn):
    with pytest.raises(ValueError):
        write_aer(fn[1], fatal={'Meltdown': 1})


# --- nvidia_gpu: AER and Xid ---------------------------------------------------------
@pytest.fixture
def gpu(conf, tmp_path):
    root = tmp_path / 'sys'
    path = make_pci(root, '0000:3b:00.0', '0x10de', '0x1eb8', cls='0x030200',
                    driver='nvidia')
    write_aer(path)
    log = tmp_path / 'kern.log'
    log.write_text('Nov 28 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, old\n')
    conf.set_override('sysfs_root', str(root))
    conf.set_override('gpu_kernel_log', str(log), group='health')
    return root, path, log


def test_a_critical_xid_logged_after_the_agent_started_is_unhealthy(conf, gpu):
    root, path, log = gpu
    driver = nvidia_gpu.NvidiaGpuDriver(conf, 'cmp1')
    assert reading(driver).conditions == ()         # the old line is not news
    with open(log, 'a') as f:
        f.write('Nov 28 10:05:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=42, '
                'Graphics Exception\n')
        f.write('Nov 28 10:05:01 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=\'<unknown>\', '
                'GPU has fallen off the bus.\n')
        f.write('Nov 28 10:05:02 h kernel: NVRM: Xid (PCI:0000:5e:00): 48, other GPU\n')
    r = reading(driver)
    assert codes(r) == {('gpu.xid', 'warning'), ('gpu.xid_critical', 'unhealthy')}
    assert any('GPU has fallen off the bus' in c.detail for c in r.conditions)
    # an event, read once: the conductor's fault keeps the GPU out after it
    assert reading(driver).conditions == ()


def test_a_rotated_log_is_read_from_its_start(conf, gpu):
    root, path, log = gpu
    driver = nvidia_gpu.NvidiaGpuDriver(conf, 'cmp1')
    log.write_text('NVRM: Xid (PCI:0000:3b:00): 48, DBE\n')     # shorter: rotated
    assert codes(reading(driver)) == {('gpu.xid_critical', 'unhealthy')}


def test_a_gpu_reads_its_aer_counters_too(conf, gpu):
    root, path, log = gpu
    driver = nvidia_gpu.NvidiaGpuDriver(conf, 'cmp1')
    write_aer(path, fatal={'Surprise Down Error': 1})
    assert codes(reading(driver)) == {('pci.aer_fatal', 'unhealthy')}


# --- mdev parents ------------------------------------------------------------------------
def test_an_mdev_parents_aer_counters(conf, tmp_path):
    from steward.drivers.mdev import driver as mdev
    from tests.fixtures.mdev_tree import MdevTree
    tree = MdevTree(tmp_path / 'sys')
    parent = '0000:00:02.0'
    path = tree.add_pci_parent(parent, {'i915-GVTg_V5_4': {'available': 2}})
    conf.set_override('sysfs_root', str(tree.root))
    conf.set_override('device_spec', [json.dumps({'address': parent,
                                                  'mdev_type': 'i915-GVTg_V5_4'})],
                      group='mdev')
    driver = mdev.MdevDriver(conf, 'cmp1')
    assert reading(driver).conditions == ()
    write_aer(path, fatal={'Malformed TLP': 3})
    assert codes(reading(driver)) == {('pci.aer_fatal', 'unhealthy')}


# --- the fake driver ---------------------------------------------------------------------
def test_the_fake_driver_is_told_its_health(conf, tmp_path):
    told = tmp_path / 'fake-health.json'
    conf.set_override('fake_health_file', str(told), group='health')
    driver = fake.FakeDriver(conf, 'cmp1')
    assert reading(driver).state == health.HEALTH_OK           # no file yet
    told.write_text(json.dumps({'state': 'unhealthy', 'detail': 'demo'}))
    r = reading(driver)
    assert codes(r) == {('fake.told', 'unhealthy')} and r.conditions[0].detail == 'demo'
    told.write_text(json.dumps({'state': 'warning'}))
    assert reading(driver).state == health.HEALTH_WARNING
    told.write_text('{"state": "on fire"}')                      # refused: no reading
    (dev,) = driver.discover()
    assert dev.health is None


def test_sysfs_tree_fixture_names_match_the_module(fn):
    # The aer files hold exactly the kernel's names, in order, then the total.
    lines = (fn[1] / 'aer_dev_correctable').read_text().splitlines()
    assert [ln.rpartition(' ')[0] for ln in lines] == \
        list(sysfs_tree.AER_CORRECTABLE) + ['TOTAL_ERR_COR']

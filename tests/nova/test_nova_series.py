"""contrib/nova/: Steward's Nova patch series, applied to the real nova 34.0.0 and
tested by Nova's own unit tests (tools/nova-series.sh test): the whole of
nova/tests/unit/virt/libvirt/test_driver.py and nova/tests/unit/accelerator/, and the
resize/cold migration tests of the conductor's migration task, the compute manager,
the compute API, the objects and the API controllers, the series' own tests among
them, all passing."""
import json
import os
import re
import subprocess

import pytest

from tests.nova import series

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(series.XDIST_GROUP)]

# Tests the series adds (a ddt test counts once per data set).
SERIES_TESTS = {
    'nova.tests.unit.virt.libvirt.test_driver.LibvirtConnTestCase.':
        ['test_guest_add_accel_pci_devices_managed_1',
         'test_guest_add_accel_pci_devices_managed_absent',
         'test_guest_add_accel_pci_devices_managed_per_arq',
         'test_guest_add_accel_pci_devices_managed_invalid_1',
         'test_guest_add_accel_pci_devices_managed_parallels'],
    'nova.tests.unit.accelerator.test_cyborg.CyborgTestCase.':
        ['test_get_arqs_microversion_managed',
         'test_get_arqs_microversion_not_offered',
         'test_get_arqs_microversion_no_microversions',
         'test_get_arqs_microversion_no_endpoint_data',
         'test_get_arqs_microversion_discovery_failure',
         'test_device_profile_calls_keep_no_microversion',
         # 0003
         'test_get_arqs_microversion_move',
         'test_get_arqs_microversion_move_and_more',
         'test_get_arqs_microversion_minimum_above_managed',
         'test_check_arqs_movable_cold',
         'test_check_arqs_movable_live',
         'test_check_arqs_movable_nvme_refused',
         'test_check_arqs_movable_before_microversion_2_7',
         'test_check_arqs_movable_only_the_move_asked',
         'test_check_arqs_movable_not_a_boolean',
         'test_check_arqs_movable_unbound',
         'test_check_arqs_movable_from_a_read_at_2_7'],
    # 0004
    'nova.tests.unit.conductor.tasks.test_migrate.MigrationTaskTestCase.':
        ['test_execute_migrate_with_accelerators',
         'test_execute_resize_to_accelerators',
         'test_execute_without_accelerators',
         'test_execute_accelerators_bind_fails',
         'test_execute_accelerators_prep_resize_fails'],
    'nova.tests.unit.compute.test_compute_mgr.ComputeManagerMigrationTestCase.':
        ['test_prep_resize_with_accelerators',
         'test_prep_resize_with_accelerators_bind_failed',
         'test_prep_resize_without_accelerators_skips_cyborg',
         'test__finish_resize_with_accelerators',
         'test__finish_resize_with_accelerators_not_bound',
         'test__confirm_resize_deletes_source_arqs',
         'test__confirm_resize_without_accelerators',
         'test_revert_resize_deletes_dest_arqs',
         'test_finish_revert_resize_with_source_arqs'],
    'nova.tests.unit.compute.test_api.ComputeAPIUnitTestCase.':
        ['test_migrate_with_accelerators',
         'test_migrate_with_accelerators_not_movable',
         'test_migrate_with_accelerators_cyborg_without_2_7',
         'test_migrate_with_accelerators_old_compute',
         'test_resize_to_accelerator_flavor'],
    'nova.tests.unit.virt.libvirt.test_driver.LibvirtDriverTestCase.':
        ['test_finish_migration_with_accelerators',
         'test_finish_migration_with_accelerator_mdev',
         'test_finish_revert_migration_with_accelerators',
         'test_finish_revert_migration_with_accelerators_guest_kept'],
    'nova.tests.unit.objects.test_request_spec.TestRequestSpecObject.':
        ['test_compat_accel_uuids', 'test_accel_uuids_not_persisted'],
    'nova.tests.unit.objects.test_migration_context.TestMigrationContext.':
        ['test_accel_uuids_round_trip_and_compat'],
    'nova.tests.unit.api.openstack.compute.test_migrate_server.MigrateServerTests.':
        ['test_migrate_raise_badrequest_for_not_movable_accelerator'],
    'nova.tests.unit.api.openstack.compute.test_server_actions.'
    'ServerActionsControllerTestV21.':
        ['test_resize_raises_badrequest_for_not_movable_accelerator'],
}
PARTS = ('accel', 'libvirt', 'conductor', 'compute', 'objects', 'apictl')


# Run by .venv-nova's Python (python-subunit and testtools are there): the stream
# interleaves the workers' raw output (log lines) with subunit packets, which
# ByteStreamToStreamResult sets aside as non-test "stdout" content.
READ_STREAM = """
import json, sys
import subunit, testtools
statuses = {}
result = testtools.StreamToDict(lambda t: statuses.__setitem__(t['id'], t['status']))
with open(sys.argv[1], 'rb') as f:
    result.startTestRun()
    subunit.ByteStreamToStreamResult(f, non_subunit_name='stdout').run(result)
    result.stopTestRun()
print(json.dumps(statuses))
"""


def results(part):
    """{test id: status} of one stestr run (its subunit stream)."""
    out = subprocess.run([series.PYTHON, '-c', READ_STREAM,
                          os.path.join(series.VENV, f'{part}.subunit')],
                         capture_output=True, text=True, check=True)
    return {t.split('[')[0]: s for t, s in json.loads(out.stdout).items()}


def test_series_is_well_formed():
    names = series.series()
    assert names == sorted(names) and names, names
    for n, name in enumerate(names, 1):
        assert name.startswith(f'{n:04d}-') and name.endswith('.patch'), name
        with open(os.path.join(series.SERIES_DIR, name)) as f:
            text = f.read()
        assert f'Subject: [PATCH {n}/{len(names)}]' in text, name
        assert re.search(r'^(Blueprint: |Closes-Bug: |Partial-Bug: |Related-Bug: |'
                         r'(Partially-)?Implements: blueprint )', text, re.M), name
        # One change per commit, each with its reno note and its unit tests.
        files = re.findall(r'^diff --git a/(\S+)', text, re.M)
        assert any(f.startswith('releasenotes/notes/') and f.endswith('.yaml')
                   for f in files), (name, files)
        assert any(f.startswith('nova/tests/unit/') for f in files), (name, files)


def test_nova_unit_tests_pass_with_the_series():
    series.prepare()
    out = series.run_script('test', timeout=1200)
    statuses = {}
    for part in PARTS:
        found = results(part)
        assert found, f'no test ran in {part}: {out.stderr[-3000:]}'
        statuses.update(found)
    failed = sorted(t for t, s in statuses.items()
                    if s not in ('success', 'skip', 'xfail'))
    assert failed == [], out.stderr[-6000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # The whole of test_driver.py ran (about 1 200 tests), not a filtered part.
    libvirt = [t for t in statuses if '.virt.libvirt.test_driver.' in t]
    assert len(libvirt) > 1000, len(libvirt)
    assert len([t for t in statuses if '.unit.accelerator.' in t]) > 30
    # The filtered parts ran their tests (a filter that matches nothing would not).
    for marker, least in (('.conductor.tasks.test_migrate.', 20),
                          ('.compute.test_compute_mgr.', 100),
                          ('.compute.test_api.', 50),
                          ('.objects.test_request_spec.', 50),
                          ('.api.openstack.compute.test_migrate_server.', 20)):
        assert len([t for t in statuses if marker in t]) >= least, marker
    for prefix, names in SERIES_TESTS.items():
        for name in names:
            ran = [t for t in statuses if t.startswith(prefix + name)]
            assert ran and all(statuses[t] == 'success' for t in ran), (name, ran)

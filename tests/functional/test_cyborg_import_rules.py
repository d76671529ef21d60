"""The import's rules on Cyborg databases the fake driver cannot produce: Cyborg's
real schema (made by upstream's own `cyborg-dbsync create_schema` in .venv-cyborg)
holding rows an FPGA, a GPU or a half-finished bind would leave; Steward's
conductor and agent (fake driver, and a driver that names a deployable otherwise)
then run on the imported rows. The whole switch from a running Cyborg is
tests/functional/test_cyborg_import.py."""
import datetime
import json
import os
import shutil
import uuid

import pytest
import sqlalchemy as sa

from steward.cmd import import_cyborg
from steward.common import exception
from steward.cyborg_import import importer as cyborg_import
from steward.cyborg_import import translation
from steward.db import models as m
from steward.drivers import base
from steward.drivers import objects
from tests.fixtures import cyborg_upstream as cu
from tests.fixtures import requirements
from tests.functional.conductor_fixtures import admin, make_profile, stack

# One xdist worker runs the Cyborg tests one after another: two Cyborg deployments
# at once would share the CI's two cores with everything else.
pytestmark = pytest.mark.xdist_group('cyborg')
HOST = 'host-a'
NOW = datetime.datetime(2026, 11, 1, 12, 0, 0)


def _import(database, url, **kwargs):
    """The import as `steward db import-cyborg` runs it: fake deployables paired
    with what Steward's fake driver reports."""
    return cyborg_import.run(database, url,
                             fake_devices=import_cyborg.fake_driver_devices, **kwargs)


@pytest.fixture(scope='module')
def cyborg_schema(tmp_path_factory):
    """A SQLite file with Cyborg 17.0.0's schema, made by Cyborg's own tool."""
    try:
        cu.ensure_venv()
    except (RuntimeError, OSError) as err:
        requirements.need('cyborg', f'cannot build .venv-cyborg: {err}')
    tmp = str(tmp_path_factory.mktemp('cyborg-schema'))
    url = f'sqlite:///{tmp}/cyborg.db'
    conf = cu.write_config(tmp, 'rabbit://unused', 'http://127.0.0.1:9',
                           'http://127.0.0.1:9', url)
    cu.dbsync(conf, url)
    return os.path.join(tmp, 'cyborg.db')


class Cyborg:
    """Rows written into a copy of Cyborg's schema, by column name."""

    def __init__(self, path):
        self.url = f'sqlite:///{path}'
        self.engine = sa.create_engine(self.url)
        self.meta = sa.MetaData()
        self.meta.reflect(self.engine)

    def add(self, table, **values):
        values.setdefault('created_at', NOW)
        if 'uuid' in self.meta.tables[table].c:
            values.setdefault('uuid', str(uuid.uuid4()))
        with self.engine.begin() as conn:
            return conn.execute(self.meta.tables[table].insert().values(**values)) \
                .inserted_primary_key[0]

    def device(self, type_, vendor, bdf, dep_name, driver, attach_type, handles,
               rc, bitstream_id=None):
        dev = self.add('devices', type=type_, vendor=vendor, model='m', hostname=HOST,
                       status='enabled', device_state='available',
                       std_board_info='{}')
        domain, bus, rest = bdf.split(':')
        slot, fn = rest.split('.')
        cpid = self.add('controlpath_ids', device_id=dev, cpid_type='PCI',
                        cpid_info=f'{{"domain":"{domain}","bus":"{bus}",'
                                  f'"device":"{slot}","function":"{fn}"}}')
        dep = self.add('deployables', name=dep_name, num_accelerators=len(handles),
                       device_id=dev, rp_uuid=str(uuid.uuid3(uuid.NAMESPACE_DNS,
                                                              dep_name)),
                       driver_name=driver, bitstream_id=bitstream_id)
        self.add('attributes', deployable_id=dep, key='rc', value=rc)
        ids = [self.add('attach_handles', deployable_id=dep, cpid_id=cpid, in_use=False,
                        attach_type=attach_type, attach_info=info) for info in handles]
        return dev, dep, ids

    def profile(self, name='dp1', rc='FPGA'):
        return self.add('device_profiles', name=name,
                        profile_json=f'{{"groups": [{{"resources:{rc}": "1"}}]}}')

    def arq(self, profile, state, handle=None, dep=None, instance=None):
        if handle is not None:
            with self.engine.begin() as conn:
                t = self.meta.tables['attach_handles']
                conn.execute(t.update().where(t.c.id == handle).values(in_use=True))
        uuid_ = str(uuid.uuid4())
        self.add('extended_accelerator_requests', uuid=uuid_, project_id='p1',
                 state=state, device_profile_id=profile, device_profile_group_id=0,
                 hostname=HOST if instance else None,
                 instance_uuid=instance, attach_handle_id=handle, deployable_id=dep,
                 substate='Initial')
        return uuid_

    def revision(self, rev):
        with self.engine.begin() as conn:
            conn.execute(sa.text('UPDATE alembic_version SET version_num = :r'),
                         {'r': rev})


@pytest.fixture
def cyborg(cyborg_schema, tmp_path):
    path = tmp_path / 'cyborg.db'
    shutil.copy(cyborg_schema, path)
    c = Cyborg(path)
    yield c
    c.engine.dispose()


def _pci(bdf_slot, fn, fmt='{"domain":"0000","bus":"0a","device":"%s","function":"%s"}'):
    return fmt % (bdf_slot, fn)


def _device(database, uuid_):
    with database.reader() as s:
        return s.execute(sa.select(m.Device).where(m.Device.uuid == uuid_)).scalar_one()


def _arq(database, uuid_):
    with database.reader() as s:
        row = s.execute(sa.select(m.ExtARQ).where(m.ExtARQ.uuid == uuid_)) \
            .scalar_one_or_none()
        if row is None:
            return None
        handle = s.get(m.AttachHandle, row.attach_handle_id) \
            if row.attach_handle_id else None
        return row, handle


def _uuid_of(cyborg, table, row_id):
    with cyborg.engine.connect() as conn:
        t = cyborg.meta.tables[table]
        return conn.execute(sa.select(t.c.uuid).where(t.c.id == row_id)).scalar_one()


def test_unknown_revision_is_refused_by_name(database, cyborg, db):
    cyborg.revision('6c77bd6afea5')      # Cyborg before 17.0.0: no device_state
    with pytest.raises(exception.CyborgSchemaUnknown) as err:
        _import(database, cyborg.url)
    assert '6c77bd6afea5' in str(err.value) and 'b47c8f2d1e3a' in str(err.value)
    assert err.value.code == 'cyb.cyborg_import.schema_unknown'


def test_non_empty_steward_database_needs_a_merge_policy(database, cyborg, db):
    cyborg.profile('from-cyborg')
    make_profile(database, 'steward-own')
    with pytest.raises(exception.CyborgImportRefused) as err:
        _import(database, cyborg.url)
    assert '--merge keep-steward' in str(err.value)
    with database.reader() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(m.DeviceProfile)) \
            .scalar() == 1
    result = _import(database, cyborg.url, merge='keep-steward')
    assert result.written == {'device_profiles': 1}
    # A dry run of it again: nothing written (an earlier run holds everything).
    assert _import(database, cyborg.url, merge='keep-steward', dry_run=True) \
        .already_imported


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_transitional_arqs_follow_the_documented_rule(transport, database, cyborg, db, conf):
    dev, dep, handles = cyborg.device(
        'FPGA', '0xABCD', '0000:0c:00.0', f'{HOST}_FakeDevice', 'fake', 'TEST_PCI',
        [_pci('0', str(fn), '{"domain":"0000","bus":"0c","device":"%s",'
                            '"function":"%s"}') for fn in range(1, 17)], 'FPGA')
    dp = cyborg.profile()
    inst_bound, inst_started, inst_deleting = (str(uuid.uuid4()) for _ in range(3))
    bound = cyborg.arq(dp, 'Bound', handles[0], dep, inst_bound)
    started = cyborg.arq(dp, 'BindStarted', None, None, inst_started)
    # A bind cut off after its handle was taken: in use, no ARQ holds it.
    with cyborg.engine.begin() as conn:
        t = cyborg.meta.tables['attach_handles']
        conn.execute(t.update().where(t.c.id == handles[1]).values(in_use=True))
    deleting = cyborg.arq(dp, 'Deleting', handles[2], dep, inst_deleting)

    result = _import(database, cyborg.url)
    assert any('in use in Cyborg but no Bound ARQ holds it' in w for w in result.warnings)
    arq, handle = _arq(database, bound)
    assert arq.state == 'Bound' and handle.in_use
    assert handle.uuid == _uuid_of(cyborg, 'attach_handles', handles[0])
    # Steward's fake driver reports that handle (Cyborg's function 1) as 0c:00.0.
    assert handle.discovered_as == objects.pci_info('0000', '0c', '00', '0')
    arq, handle = _arq(database, started)
    assert arq.state == 'BindFailed' and handle is None
    arq, handle = _arq(database, deleting)
    assert arq.state == 'Deleting' and handle.in_use
    device = _device(database, _uuid_of(cyborg, 'devices', dev))
    assert device.device_state == 'allocated' and device.imported_from == 'cyborg'

    conductor, agent = stack(database, transport, conf, host=HOST)
    try:
        # The first discovery recognises the device, its deployable and handles.
        device = _device(database, device.uuid)
        assert device.imported_from is None and device.missing_since is None
        with database.reader() as s:
            assert s.execute(sa.select(sa.func.count()).select_from(m.Device)).scalar() == 1
            rows = s.execute(sa.select(m.AttachHandle)).scalars().all()
        # The 16 imported, each one of Steward's fake driver's 16 functions.
        assert len(rows) == 16
        assert len({r.discovered_as or r.attach_info for r in rows}) == 16
        # Nova's delete by instance finishes the Deleting one and frees its handle;
        # the Bound one releases as any Steward ARQ.
        conductor.arq_delete(admin(), instance_uuid=inst_deleting)
        conductor.arq_delete(admin(), instance_uuid=inst_bound)
        assert _arq(database, deleting) is None and _arq(database, bound) is None
        with database.reader() as s:
            assert not s.execute(sa.select(m.AttachHandle).where(
                m.AttachHandle.in_use.is_(True))).first()
            released = s.execute(sa.select(m.AttachHandle).where(
                m.AttachHandle.uuid == _uuid_of(cyborg, 'attach_handles', handles[0]))) \
                .scalar_one()
        assert released.attach_info == objects.pci_info('0000', '0c', '00', '0')
        assert released.discovered_as is None
        assert _device(database, device.uuid).device_state == 'available'
    finally:
        agent.stop()
        conductor.stop()


def test_device_steward_has_no_driver_for_is_kept_not_offered(transport, database, cyborg, db, conf):
    dev, dep, handles = cyborg.device(
        'FPGA', '0x8086', '0000:5e:00.0', f'{HOST}_0000:5e:00.0', 'intel', 'PCI',
        [_pci('00', '1', '{"domain":"0000","bus":"5e","device":"%s",'
                         '"function":"%s"}')], 'FPGA',
        bitstream_id=str(uuid.uuid4()))
    dp = cyborg.profile()
    inst = str(uuid.uuid4())
    arq_uuid = cyborg.arq(dp, 'Bound', handles[0], dep, inst)

    result = _import(database, cyborg.url)
    device_uuid = _uuid_of(cyborg, 'devices', dev)
    [warning] = result.warnings
    assert device_uuid in warning and 'no driver' in warning
    device = _device(database, device_uuid)
    assert (device.status, device.device_state) == ('maintaining', 'allocated')
    with database.reader() as s:
        deployable = s.execute(sa.select(m.Deployable)).scalar_one()
    assert deployable.bitstream_id is not None

    conductor, agent = stack(database, transport, conf, host=HOST)      # Steward's fake driver only
    try:
        device = _device(database, device_uuid)
        assert device.missing_since is not None and device.imported_from == 'cyborg'
        conductor.arq_delete(admin(), instance_uuid=inst)
        assert _arq(database, arq_uuid) is None
        device = _device(database, device_uuid)
        assert (device.status, device.device_state) == ('maintaining', 'available')
        # Not offered anew: Placement reserves it whole, a bind is refused.
        from steward.arqs import reservation
        with database.reader() as s:
            rule = reservation.policy(s, s.get(m.Device, device.id), [deployable])
            assert rule.reserved_for(deployable) == deployable.num_accelerators
            assert isinstance(rule.refusal, exception.DeviceMaintaining)
        # Available now, still not found: kept (reported missing), never deleted.
        agent.run_cycle()
        device = _device(database, device_uuid)
        assert device.missing_since is not None
        with database.reader() as s:
            handle = s.execute(sa.select(m.AttachHandle).where(
                m.AttachHandle.deployable_id == deployable.id)).scalar_one()
        assert not handle.in_use
    finally:
        agent.stop()
        conductor.stop()


class _RenamingGpuDriver(base.Driver):
    """A driver of Steward's that names the device's deployable its own way."""
    name = 'renaming'

    def discover(self):
        handle = objects.DriverAttachHandle(
            attach_type='PCI', attach_info=objects.pci_info('0000', '0a', '00', '0'))
        dep = objects.DriverDeployable(
            name=f'{self.host}_pci_0000_0a_00_0', num_accelerators=1,
            attribute_list=[objects.DriverAttribute('rc', 'PGPU')],
            attach_handle_list=[handle], driver_name='renaming')
        return [objects.DriverDevice(
            vendor='10de', model='m', type='GPU',
            controlpath_id=objects.DriverControlPathID(
                'PCI', objects.pci_info('0000', '0a', '00', '0')),
            deployable_list=[dep], std_board_info='{}', driver_name='renaming')]


def test_deployable_named_otherwise_keeps_its_name_and_provider(transport, database, cyborg, db, conf):
    dev, dep, handles = cyborg.device(
        'GPU', '10de', '0000:0a:00.0', f'{HOST}_0000:0a:00.0', 'NVIDIA', 'PCI',
        [_pci('00', '0')], 'PGPU')
    dp = cyborg.profile(rc='PGPU')
    inst = str(uuid.uuid4())
    arq_uuid = cyborg.arq(dp, 'Bound', handles[0], dep, inst)
    _import(database, cyborg.url)

    conductor, agent = stack(database, transport, conf, host=HOST, drivers=[_RenamingGpuDriver(conf, HOST)])
    try:
        with database.reader() as s:
            [deployable] = s.execute(sa.select(m.Deployable)).scalars().all()
            [handle] = s.execute(sa.select(m.AttachHandle)).scalars().all()
        assert deployable.uuid == _uuid_of(cyborg, 'deployables', dep)
        assert deployable.name == f'{HOST}_0000:0a:00.0'
        assert deployable.rp_uuid == str(uuid.uuid3(uuid.NAMESPACE_DNS,
                                                    f'{HOST}_0000:0a:00.0'))
        assert deployable.discovered_as == f'{HOST}_pci_0000_0a_00_0'
        assert handle.uuid == _uuid_of(cyborg, 'attach_handles', handles[0])
        assert _device(database, _uuid_of(cyborg, 'devices', dev)).device_state == 'allocated'
        agent.run_cycle()           # and stays so on the next discovery
        with database.reader() as s:
            assert [d.uuid for d in s.execute(sa.select(m.Deployable)).scalars()] == \
                [deployable.uuid]
        conductor.arq_delete(admin(), instance_uuid=inst)
        assert _arq(database, arq_uuid) is None
        assert _device(database, _uuid_of(cyborg, 'devices', dev)).device_state == 'available'
    finally:
        agent.stop()
        conductor.stop()



def test_a_conflict_stops_the_import_with_nothing_written(database, cyborg, db):
    cyborg.device('FPGA', '0xABCD', '0000:0c:00.0', f'{HOST}_FakeDevice', 'fake',
                  'TEST_PCI', [_pci('0', '1')], 'FPGA')
    with pytest.raises(exception.CyborgImportConflict) as err:
        _import(database, cyborg.url)
    assert "Cyborg has 1 handles, Steward's fake driver reports 16" in str(err.value)
    with database.reader() as s:
        assert s.execute(sa.select(sa.func.count()).select_from(m.Device)).scalar() == 0


def test_merge_into_steward_that_discovered_the_device_first(transport, database, cyborg, db, conf):
    conductor, agent = stack(database, transport, conf, host=HOST)       # Steward's agent ran already
    try:
        dev, dep, handles = cyborg.device(
            'FPGA', '0xABCD', '0000:0c:00.0', f'{HOST}_FakeDevice', 'fake', 'TEST_PCI',
            [_pci('0', str(fn), '{"domain":"0000","bus":"0c","device":"%s",'
                                '"function":"%s"}') for fn in range(1, 17)], 'FPGA')
        dp = cyborg.profile()
        inst = str(uuid.uuid4())
        arq_uuid = cyborg.arq(dp, 'Bound', handles[0], dep, inst)
        with pytest.raises(exception.CyborgImportRefused):
            _import(database, cyborg.url)
        result = _import(database, cyborg.url, merge='keep-steward')
        assert result.written == {'device_profiles': 1,
                                  'extended_accelerator_requests': 1}
        assert result.kept == {'devices': 1, 'deployables': 1, 'attributes': 1,
                               'attach_handles': 16}
        arq, handle = _arq(database, arq_uuid)
        assert arq.state == 'Bound' and handle.in_use
        # Steward's own handle at the address Cyborg's maps to, showing what Cyborg
        # gave the instance until it is released.
        assert handle.discovered_as == objects.pci_info('0000', '0c', '00', '0')
        assert handle.attach_info == \
            '{"domain":"0000","bus":"0c","device":"0","function":"1"}'
        with database.reader() as s:
            [device] = s.execute(sa.select(m.Device)).scalars().all()
        assert device.device_state == 'allocated' and device.imported_from is None
        conductor.arq_delete(admin(), instance_uuid=inst)
        assert _device(database, device.uuid).device_state == 'available'
    finally:
        agent.stop()
        conductor.stop()


def test_vgpu_handles_take_the_mdev_driver_form():
    """Upstream numbers each vGPU handle; Steward's mdev handles of a type are alike."""
    info = ('{"asked_type": "nvidia-222", "bus": "84", "device": "0", "domain": "0000", '
            '"function": "0", "vgpu_mark": "nvidia-222_3"}')
    from steward.drivers.mdev import driver as mdev
    reported = json.dumps(dict(mdev.address_fields('0000:84:00.0'),
                               asked_type='nvidia-222'), sort_keys=True)
    assert translation.steward_form({'attach_type': 'MDEV', 'attach_info': info}) == \
        reported


def test_command_prints_every_conflict_and_refuses_unknown_schemas(cyborg, tmp_path):
    """`steward db import-cyborg` as an operator runs it: a dry run lists the plan and
    every conflict and exits 1; an unknown revision is named; nothing is written."""
    import subprocess
    import sys
    from tests.fixtures.stack import free_port
    steward_db = f'sqlite:///{tmp_path}/steward.db'
    conf = tmp_path / 'steward.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n[database]\n'
                    f'connection = {steward_db}\n[placement]\nauth_type = admin_token\n'
                    f'token = admin\nendpoint_override = http://127.0.0.1:{free_port()}\n')
    steward = os.path.join(os.path.dirname(sys.executable), 'steward')

    def run(*args):
        return subprocess.run([steward, 'db', *args, '--config-file', str(conf)],
                              capture_output=True, text=True, timeout=120)

    out = run('import-cyborg', '--cyborg-connection', cyborg.url, '--dry-run')
    assert out.returncode != 0 and 'steward db sync' in out.stderr
    assert run('sync').returncode == 0
    cyborg.device('FPGA', '0xABCD', '0000:0c:00.0', f'{HOST}_FakeDevice', 'fake',
                  'TEST_PCI', [_pci('0', '1')], 'FPGA')
    out = run('import-cyborg', '--cyborg-connection', cyborg.url, '--dry-run')
    assert out.returncode == 1, out.stdout + out.stderr
    assert "CONFLICT: deployable host-a_FakeDevice: Cyborg has 1 handles" in out.stdout
    assert 'refused (nothing written)' in out.stdout
    assert 'cyb.cyborg_import.conflict' in out.stderr
    cyborg.revision('0123456789ab')
    out = run('import-cyborg', '--cyborg-connection', cyborg.url)
    assert out.returncode == 1 and '0123456789ab' in out.stderr, out.stderr
    engine = sa.create_engine(steward_db)
    with engine.connect() as conn:
        assert conn.execute(sa.text('SELECT COUNT(*) FROM devices')).scalar() == 0
    engine.dispose()


def test_a_missing_or_unreachable_cyborg_database_is_a_clear_error(database, tmp_path, db):
    missing = tmp_path / 'no-such.db'
    with pytest.raises(exception.CyborgImportError, match='no SQLite database at'):
        _import(database, f'sqlite:///{missing}')
    assert not missing.exists()          # nothing created where Cyborg's was meant
    from steward.db import migration
    with pytest.raises(exception.CyborgSchemaUnknown,
                       match=f'revision {migration.head_revision()},'):
        _import(database, db)            # Steward's own database: its revision named
    empty = tmp_path / 'empty.db'
    sa.create_engine(f'sqlite:///{empty}').connect().close()
    with pytest.raises(exception.CyborgImportError, match='not a Cyborg database'):
        _import(database, f'sqlite:///{empty}')
    with pytest.raises(exception.CyborgImportError, match='--cyborg-connection'):
        _import(database, 'not a url')

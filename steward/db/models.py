"""SQLAlchemy models. Integer ids stay internal; the API speaks uuids.

Enum columns are stored as VARCHAR (``native_enum=False``) so a new device or
handle type is a code change, not an ALTER TYPE on PostgreSQL; SQLAlchemy still
refuses unknown values on write. Every lookup the API and the conductor do has an
index (upstream filtered whole tables in Python).
"""
from oslo_utils import timeutils
import sqlalchemy as sa
from sqlalchemy import orm

from steward.common import states

DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD', 'GENERIC', 'PCI', 'MDEV', 'NVME')
ATTACH_TYPES = ('PCI', 'MDEV', 'TEST_PCI')
CPID_TYPES = ('PCI', 'SYSFS')   # SYSFS: a non-PCI device named in a sysfs class


def _enum(name, values):
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=False,
                   validate_strings=True, length=32)


class Base(orm.DeclarativeBase):
    pass


class TimestampMixin:
    created_at = orm.mapped_column(sa.DateTime, default=timeutils.utcnow,
                                   nullable=False)
    updated_at = orm.mapped_column(sa.DateTime, nullable=True, onupdate=timeutils.utcnow)


class Device(TimestampMixin, Base):
    __tablename__ = 'devices'
    __state_kind__ = 'device'
    __state_column__ = 'device_state'
    __table_args__ = (
        sa.Index('devices_hostname_idx', 'hostname'),
        sa.Index('devices_type_idx', 'type'),
        sa.Index('devices_device_state_idx', 'device_state'),
        sa.Index('devices_identity_idx', 'identity'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    type = orm.mapped_column(_enum('device_type', DEVICE_TYPES), nullable=False)
    vendor = orm.mapped_column(sa.String(255), nullable=False)
    model = orm.mapped_column(sa.String(255), nullable=False)
    std_board_info = orm.mapped_column(sa.Text)
    vendor_board_info = orm.mapped_column(sa.Text)
    hostname = orm.mapped_column(sa.String(255), nullable=False, server_default='')
    status = orm.mapped_column(_enum('device_status', states.DEVICE_STATUSES),
                               nullable=False, default=states.DEVICE_STATUS_ENABLED)
    # Nullable on purpose (spec 1): rows from before this column are NULL until the
    # online data migration decides between available and allocated.
    device_state = orm.mapped_column(_enum('device_state', states.DEVICE_STATES),
                                     nullable=True)
    # Why the device last entered error; cleared when it is available again.
    last_error = orm.mapped_column(sa.Text)
    # Set while a device that is not available is absent from discovery: it is
    # kept, reserved, and comes back in the state it left.
    missing_since = orm.mapped_column(sa.DateTime)
    # What survives a new PCI address (NVMe: serial + subsystem NQN); NULL when the
    # driver cannot tell, and then the control-path id is the identity.
    identity = orm.mapped_column(sa.String(255))
    # Set by `steward db import-cyborg` (``cyborg``) until a discovery of Steward's
    # recognises the device: until then it is kept (as missing) when not found.
    imported_from = orm.mapped_column(sa.String(64))
    # Health as the driver last read it (steward/common/health.py): NULL = never
    # read. health_conditions is a JSON list of {code, severity, detail}. No index
    # (migration 0009 only adds columns): ?health= scans the devices table.
    health = orm.mapped_column(sa.String(16))
    health_conditions = orm.mapped_column(sa.Text)
    health_read_at = orm.mapped_column(sa.DateTime)
    # The unhealthy conditions that took the device out of service: it stays out
    # (reserved, never bound, never handed out again) until an operator brings it
    # back once they have cleared, whatever later readings say.
    health_fault = orm.mapped_column(sa.Text)

    deployables = orm.relationship('Deployable', back_populates='device',
                                   lazy='raise')
    controlpath_ids = orm.relationship('ControlpathID', back_populates='device',
                                       lazy='raise')


# What a device that gave up its control-path id holds instead (a missing drive
# whose slot now holds another drive, see conductor/report.py): unique, and never a
# control-path id a driver reports.
RELEASED_CPID_PREFIX = 'released:'


def released_cpid(device_uuid):
    return f'{RELEASED_CPID_PREFIX}{device_uuid}'


class ControlpathID(TimestampMixin, Base):
    """One device's control-path id (its PCI address). At most one device of a
    host holds a given id: ``hostname`` is the device's, copied here so that the
    database can say so."""
    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.Index('controlpath_ids_device_id_idx', 'device_id'),
        sa.Index('controlpath_ids_cpid_info_idx', 'cpid_info'),
        sa.Index('uniq_controlpath_ids0hostname0cpid_info', 'hostname', 'cpid_info',
                 unique=True),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    device_id = orm.mapped_column(sa.ForeignKey('devices.id', ondelete='RESTRICT'),
                                  nullable=False)
    hostname = orm.mapped_column(sa.String(255), nullable=False)
    cpid_type = orm.mapped_column(_enum('cpid_type', CPID_TYPES), nullable=False)
    cpid_info = orm.mapped_column(sa.String(255), nullable=False)

    device = orm.relationship('Device', back_populates='controlpath_ids', lazy='raise')


@sa.event.listens_for(ControlpathID, 'before_insert')
def _hostname_of_device(_mapper, connection, target):
    if target.hostname is None:
        target.hostname = connection.execute(
            sa.select(Device.hostname).where(Device.id == target.device_id)).scalar_one()


class Deployable(TimestampMixin, Base):
    __tablename__ = 'deployables'
    __table_args__ = (
        sa.Index('deployables_device_id_idx', 'device_id'),
        sa.Index('deployables_rp_uuid_idx', 'rp_uuid'),
        # The name makes the resource provider (rp_uuid is uuid3 of it): two
        # deployables with one name would share a provider.
        sa.Index('uniq_deployables0name', 'name', unique=True),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    parent_id = orm.mapped_column(sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    root_id = orm.mapped_column(sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    name = orm.mapped_column(sa.String(255), nullable=False)
    num_accelerators = orm.mapped_column(sa.Integer, nullable=False)
    device_id = orm.mapped_column(sa.ForeignKey('devices.id', ondelete='RESTRICT'),
                                  nullable=False)
    rp_uuid = orm.mapped_column(sa.String(36))
    driver_name = orm.mapped_column(sa.String(100))
    bitstream_id = orm.mapped_column(sa.String(36))
    # The name Steward's driver reports for a deployable imported from Cyborg under
    # another name: the row keeps Cyborg's name, so its resource provider.
    discovered_as = orm.mapped_column(sa.String(255))

    device = orm.relationship('Device', back_populates='deployables', lazy='raise')


class Attribute(TimestampMixin, Base):
    __tablename__ = 'attributes'
    __table_args__ = (
        sa.Index('attributes_deployable_id_idx', 'deployable_id'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    deployable_id = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'), nullable=False)
    key = orm.mapped_column(sa.String(255), nullable=False)
    value = orm.mapped_column(sa.Text, nullable=False)


class AttachHandle(TimestampMixin, Base):
    __tablename__ = 'attach_handles'
    __table_args__ = (
        # Handle allocation picks a free handle of one deployable.
        sa.Index('attach_handles_deployable_in_use_idx', 'deployable_id', 'in_use'),
        sa.Index('attach_handles_cpid_id_idx', 'cpid_id'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    deployable_id = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'), nullable=False)
    cpid_id = orm.mapped_column(sa.ForeignKey('controlpath_ids.id', ondelete='RESTRICT'),
                                nullable=False)
    in_use = orm.mapped_column(sa.Boolean, nullable=False, default=False)
    attach_type = orm.mapped_column(_enum('attach_type', ATTACH_TYPES), nullable=False)
    attach_info = orm.mapped_column(sa.String(255), nullable=False)
    # The attach info Steward's driver reports for a handle imported from Cyborg
    # while in use: attach_info keeps what Cyborg gave the instance until release.
    discovered_as = orm.mapped_column(sa.String(255))


class DeviceProfile(TimestampMixin, Base):
    __tablename__ = 'device_profiles'

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    name = orm.mapped_column(sa.String(255), nullable=False, unique=True)
    profile_json = orm.mapped_column(sa.Text, nullable=False)
    description = orm.mapped_column(sa.Text)


class ExtARQ(TimestampMixin, Base):
    __tablename__ = 'extended_accelerator_requests'
    __state_kind__ = 'arq'
    __state_column__ = 'state'
    __table_args__ = (
        sa.Index('extarq_instance_uuid_idx', 'instance_uuid'),
        sa.Index('extarq_project_id_idx', 'project_id'),
        sa.Index('extarq_device_profile_id_idx', 'device_profile_id'),
        sa.Index('extarq_attach_handle_id_idx', 'attach_handle_id'),
        sa.Index('extarq_deployable_id_idx', 'deployable_id'),
        sa.Index('extarq_state_idx', 'state'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    project_id = orm.mapped_column(sa.String(255))
    state = orm.mapped_column(_enum('arq_state', states.ARQ_STORED_STATES), nullable=False,
                              default=states.ARQ_INITIAL)
    device_profile_id = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='RESTRICT'), nullable=False)
    device_profile_group_id = orm.mapped_column(sa.Integer, nullable=False, default=0)
    hostname = orm.mapped_column(sa.String(255))
    device_rp_uuid = orm.mapped_column(sa.String(36))
    instance_uuid = orm.mapped_column(sa.String(36))
    attach_handle_id = orm.mapped_column(
        sa.ForeignKey('attach_handles.id', ondelete='RESTRICT'))
    deployable_id = orm.mapped_column(sa.ForeignKey('deployables.id', ondelete='RESTRICT'))

    device_profile = orm.relationship('DeviceProfile', lazy='raise')
    attach_handle = orm.relationship('AttachHandle', lazy='raise')


ERASE_STATUSES = ('running', 'succeeded', 'failed', 'interrupted')


class EraseRecord(TimestampMixin, Base):
    """One cleanup attempt of one device: the erase certificate operators and
    auditors read (spec 1, beyond the spec: serial, firmware, action, capabilities,
    timings, SSTAT, read-back verification, assurance level). Keyed by the device
    uuid without a foreign key on purpose: the record must outlive the device row
    (a device that is replaced or no longer discovered is deleted)."""
    __tablename__ = 'erase_records'
    __state_kind__ = 'erase'
    __state_column__ = 'status'
    __table_args__ = (
        sa.Index('erase_records_device_uuid_idx', 'device_uuid'),
        sa.Index('erase_records_status_idx', 'status'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    device_uuid = orm.mapped_column(sa.String(36), nullable=False)
    hostname = orm.mapped_column(sa.String(255))
    pci_address = orm.mapped_column(sa.String(32))
    trigger = orm.mapped_column(sa.String(32))          # unbind | operator | recovery
    status = orm.mapped_column(_enum('erase_status', ERASE_STATUSES), nullable=False)
    action = orm.mapped_column(sa.String(32))
    assurance_level = orm.mapped_column(sa.String(32))
    serial = orm.mapped_column(sa.String(255))
    model = orm.mapped_column(sa.String(255))
    firmware = orm.mapped_column(sa.String(255))
    capabilities = orm.mapped_column(sa.Text)           # JSON object
    started_at = orm.mapped_column(sa.DateTime)
    finished_at = orm.mapped_column(sa.DateTime)
    phase = orm.mapped_column(sa.String(32))
    progress = orm.mapped_column(sa.Float)              # percent of the current phase
    progress_detail = orm.mapped_column(sa.Text)
    sstat = orm.mapped_column(sa.Integer)
    sstat_text = orm.mapped_column(sa.Text)
    verification = orm.mapped_column(sa.String(16))     # passed | failed | skipped
    verification_detail = orm.mapped_column(sa.Text)
    error_code = orm.mapped_column(sa.String(64))
    error_message = orm.mapped_column(sa.Text)
    details = orm.mapped_column(sa.Text)                # JSON: namespaces, watermarks...
    # JSON: what Identify advertised, the action chosen, why, what was sent (issue 21)
    capability_decision = orm.mapped_column(sa.Text)


class DeviceHistory(Base):
    """One row per device state change, written by ``transitions.advance`` in the
    transaction of the change (Ironic's node history). Keyed by the device uuid
    without a foreign key, like erase records: it outlives the device row."""
    __tablename__ = 'device_history'
    __table_args__ = (
        sa.Index('device_history_device_uuid_idx', 'device_uuid'),
    )

    id = orm.mapped_column(sa.Integer, primary_key=True)
    uuid = orm.mapped_column(sa.String(36), nullable=False, unique=True)
    device_uuid = orm.mapped_column(sa.String(36), nullable=False)
    created_at = orm.mapped_column(sa.DateTime, default=timeutils.utcnow,
                                   nullable=False)
    event = orm.mapped_column(sa.String(64), nullable=False)
    source_state = orm.mapped_column(sa.String(32))
    target_state = orm.mapped_column(sa.String(32), nullable=False)
    reason = orm.mapped_column(sa.Text)
    request_id = orm.mapped_column(sa.String(255))
    # Who made the change: "conductor <host>", "agent <host>", "user <id>".
    actor = orm.mapped_column(sa.String(255))


class HostReport(Base):
    """The digest (steward/common/report_digest.py) of the last report of a host
    whose rows and Placement providers are in place (migration 0010): any
    conductor that receives the same report again, or only its digest (RPC 1.3
    ``report_unchanged``), has nothing to do. NULL (or no row): the next report
    goes through the diff. One row per host that has reported."""
    __tablename__ = 'host_reports'
    __table_args__ = {'mysql_charset': 'utf8mb4', 'mysql_collate': 'utf8mb4_bin'}

    hostname = orm.mapped_column(sa.String(255), primary_key=True)
    digest = orm.mapped_column(sa.String(64))
    # The newest health reading time the host's devices hold (written with the
    # report, and by the refresh of quiet reports: health_ops.refresh_read_at).
    health_read_at = orm.mapped_column(sa.DateTime)
    updated_at = orm.mapped_column(sa.DateTime, nullable=True)


# transitions.advance() records every device transition here.
Device.__history__ = DeviceHistory

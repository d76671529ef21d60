"""`steward db import-cyborg`: take over an upstream Cyborg's database.

Reads a Cyborg database (any SQLAlchemy URL) at a schema revision it knows, by
column name, and writes Steward's database with the same uuids: device profiles,
devices, control-path ids, deployables, attributes, attach handles and every
accelerator request (ARQ). Placement is not rebuilt: Steward adopts Cyborg's
resource providers (same uuids and names); the one Placement write is adding
``OWNER_CYBORG`` to a provider that lacks it (Steward manages no provider without
it), and a dry run or a second run makes none.

Rules (doc/switching-from-cyborg.md says the same for operators):

* ``device_state`` comes from what is bound, not from Cyborg's column (Cyborg
  leaves a device with a handle in use ``available``): ``allocated`` when a handle
  is in use, else ``available``; the change is a recorded transition
  (``transitions.advance``, actor ``import-cyborg``). ``status`` (enabled/maintaining)
  is kept.
* Attach handles are stored the way Steward's driver will discover them (the
  first discovery then recognises them): the fake driver's handles are paired in
  address order with what Steward's fake driver reports (upstream numbers them
  from function 1 in decimal, Steward from device 00 in hex); other drivers' PCI
  addresses are normalised (hex, zero-padded, sorted keys). A handle in use keeps
  the attach info Cyborg gave the instance until it is released, and records
  Steward's form in ``discovered_as``.
* ARQs keep their state, except a transitional one: ``BindStarted`` (a bind that
  the switch cut off) becomes ``BindFailed`` with its handle freed (Nova's wait
  resolves to failed and Nova deletes it); ``Deleting`` stays ``Deleting`` with its
  handle until Steward's reconciliation (or Nova's retried delete) removes it.
* A device whose driver Steward lacks (a bitstream-programmed FPGA, SPDK) is kept
  as inventory but not offered anew: imported ``maintaining`` (Placement reserves
  it whole once its host reports), with one warning each; its bound ARQs release
  as any other.
* Not carried over: ARQ ``substate`` (always ``Initial`` upstream; Steward has no
  counterpart), the quota tables (``quota_usages``, ``reservations``: unused by
  Cyborg), Cyborg's ``device_state`` column (recomputed). ``parent_id``/``root_id``
  and ``bitstream_id`` are kept (Steward's deployables have them).
* A non-empty Steward database is refused unless ``--merge keep-steward``: a row
  Steward already has (same uuid; a device at the same host and PCI address; a
  deployable of the same name; a profile of the same name) is kept as Steward has
  it and Cyborg's rows that hang from it are attached to it. A Steward database
  that already holds every device and profile of this Cyborg database is an
  earlier run of this import: nothing is written.
"""
import dataclasses
import json
import logging

import sqlalchemy as sa

from steward.common import exception
from steward.common import states
from steward.cyborg_import import providers
from steward.cyborg_import import source
from steward.cyborg_import import translation
from steward.db import models as m
from steward.db import transitions

LOG = logging.getLogger(__name__)

MERGE_POLICIES = ('keep-steward',)
ACTOR = 'import-cyborg'
IMPORTED_FROM = 'cyborg'


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


# -- the plan ------------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    revision: str
    already_imported: bool = False
    written: dict = dataclasses.field(default_factory=dict)     # table: rows
    kept: dict = dataclasses.field(default_factory=dict)        # table: rows Steward had
    lines: list = dataclasses.field(default_factory=list)       # what is (would be) done
    conflicts: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    placement_writes: int = 0
    not_carried: dict = dataclasses.field(default_factory=dict)

    def count(self, table, kept=False):
        target = self.kept if kept else self.written
        target[table] = target.get(table, 0) + 1


class Importer:
    def __init__(self, revision, data, not_carried, merge=None, fake_devices=None):
        self.data, self.merge = data, merge
        self.fake_devices = fake_devices
        self.result = Result(revision=revision, not_carried=not_carried)
        # Cyborg row id -> Steward row id, per table.
        self.ids = {t: {} for t in source.TABLES}
        self.rows = {t: {r['id']: r for r in data[t]} for t in source.TABLES}
        self.cpid_of = {c['device_id']: c for c in data['controlpath_ids']}
        self.unsupported = {}           # Cyborg device id -> reason

    def say(self, line):
        self.result.lines.append(line)

    def conflict(self, line):
        self.result.conflicts.append(line)

    def warn(self, line):
        self.result.warnings.append(line)
        LOG.warning('%s', line)

    # -- entry point -------------------------------------------------------------------
    def run(self, session):
        if self._already_imported(session):
            self.result.already_imported = True
            self._compare(session)
            return self.result
        # Into an empty database (the usual switch) no row can exist already: no
        # look-up per row.
        self.empty = not self._steward_rows(session)
        if not self.empty and self.merge is None:
            raise exception.CyborgImportRefused(
                reason='the Steward database is not empty (%s); run it with --merge '
                       'keep-steward to keep what Steward has and add the rest' %
                       ', '.join(f'{n} {t}' for t, n in self._steward_rows(session)
                                 .items()))
        self._profiles(session)
        self._devices(session)
        self._deployables(session)
        self._attributes(session)
        self._handles(session)
        self._arqs(session)
        self._device_states(session)
        return self.result

    @staticmethod
    def _steward_rows(session):
        counts = {}
        for model in (m.DeviceProfile, m.Device, m.ExtARQ):
            n = session.execute(sa.select(sa.func.count()).select_from(model)).scalar()
            if n:
                counts[model.__tablename__] = n
        return counts

    def _already_imported(self, session):
        wanted = {('dp', r['uuid']) for r in self.data['device_profiles']} | \
            {('dev', r['uuid']) for r in self.data['devices']}
        if not wanted:
            return False
        have = {('dp', u) for u in session.execute(sa.select(m.DeviceProfile.uuid).where(
            m.DeviceProfile.uuid.in_([u for k, u in wanted if k == 'dp']))).scalars()}
        have |= {('dev', u) for u in session.execute(sa.select(m.Device.uuid).where(
            m.Device.uuid.in_([u for k, u in wanted if k == 'dev']))).scalars()}
        return have == wanted

    def _compare(self, session):
        """An earlier run imported this database: say what differs, write nothing."""
        self.say('every device and device profile of this Cyborg database is in '
                 "Steward's already (an earlier run): nothing to write")
        arqs = {r['uuid']: r for r in self.data['extended_accelerator_requests']}
        have = dict(session.execute(sa.select(m.ExtARQ.uuid, m.ExtARQ.state).where(
            m.ExtARQ.uuid.in_(list(arqs)))).all()) if arqs else {}
        for uuid, row in arqs.items():
            if uuid not in have:
                self.say(f'ARQ {uuid} ({row["state"]} in Cyborg) is no longer in Steward '
                         f'(deleted since the import): not imported again')
            elif have[uuid] != self._arq_state(row):
                self.say(f'ARQ {uuid} is {have[uuid]} in Steward, {row["state"]} in '
                         f'Cyborg: Steward\'s kept')

    # -- device profiles -----------------------------------------------------------------
    def _profiles(self, s):
        for row in self.data['device_profiles']:
            existing = [] if self.empty else s.execute(
                sa.select(m.DeviceProfile).where(sa.or_(
                    m.DeviceProfile.uuid == row['uuid'],
                    m.DeviceProfile.name == row['name']))).scalars().all()
            groups = _json(row['profile_json'])
            if not isinstance(groups, dict) or not isinstance(groups.get('groups'), list):
                self.conflict(f'device profile {row["name"]}: profile_json has no groups')
                continue
            if existing:
                dp = existing[0]
                if dp.name != row['name'] or \
                        _json(dp.profile_json).get('groups') != groups['groups']:
                    self.conflict(f'device profile {row["name"]} ({row["uuid"]}): Steward '
                                  f'has {dp.name} ({dp.uuid}) with other groups')
                elif dp.uuid != row['uuid']:
                    self.say(f'device profile {row["name"]}: Steward\'s ({dp.uuid}) kept, '
                             f'Cyborg\'s uuid {row["uuid"]} is not')
                self.ids['device_profiles'][row['id']] = dp.id
                self.result.count('device_profiles', kept=True)
                continue
            dp = m.DeviceProfile(uuid=row['uuid'], name=row['name'],
                                 profile_json=json.dumps({'groups': groups['groups']}),
                                 description=row.get('description'),
                                 created_at=row['created_at'],
                                 updated_at=row.get('updated_at'))
            s.add(dp)
            s.flush()
            self.ids['device_profiles'][row['id']] = dp.id
            self.result.count('device_profiles')
            self.say(f'device profile {dp.name} ({dp.uuid}): {len(groups["groups"])} '
                     f'group(s)')

    # -- devices and control-path ids ------------------------------------------------------
    def _devices(self, s):
        cpids = {}
        for c in self.data['controlpath_ids']:
            cpids.setdefault(c['device_id'], []).append(c)
        deps = {}
        for d in self.data['deployables']:
            deps.setdefault(d['device_id'], []).append(d)
        for row in self.data['devices']:
            for dep in deps.get(row['id'], []):
                reason = translation.unsupported_reason(row, dep)
                if reason:
                    self.unsupported[row['id']] = reason
            row_cpids = cpids.get(row['id'], [])
            if len(row_cpids) != 1:
                self.conflict(f'device {row["uuid"]} has {len(row_cpids)} control-path '
                              f'ids (Steward keeps one per device)')
                continue
            cpid = row_cpids[0]
            info = translation.normalized_info(cpid['cpid_info']) or cpid['cpid_info']
            device = held = None
            if not self.empty:
                device = s.execute(sa.select(m.Device).where(
                    m.Device.uuid == row['uuid'])).scalar_one_or_none()
                held = s.execute(sa.select(m.ControlpathID).where(
                    m.ControlpathID.hostname == row['hostname'],
                    m.ControlpathID.cpid_info == info)).scalar_one_or_none()
            if device is None and held is not None:
                device = s.get(m.Device, held.device_id)
            if device is not None:
                if self.merge is None:
                    self.conflict(f'device {row["uuid"]} on {row["hostname"]} at {info}: '
                                  f'Steward has device {device.uuid} there')
                self.ids['devices'][row['id']] = device.id
                if held is not None:
                    self.ids['controlpath_ids'][cpid['id']] = held.id
                self.result.count('devices', kept=True)
                self.say(f'device {row["uuid"]}: Steward\'s device {device.uuid} at '
                         f'{row["hostname"]} {info} kept')
                continue
            status = row.get('status') or states.DEVICE_STATUS_ENABLED
            reason = self.unsupported.get(row['id'])
            if reason:
                status = states.DEVICE_STATUS_MAINTAINING
                self.warn(f'device {row["uuid"]} on {row["hostname"]} ({row["type"]} '
                          f'{row["vendor"]}): Steward has no driver for it ({reason}); '
                          f'imported as inventory Steward keeps but does not offer '
                          f'(status maintaining); its bound ARQs release as usual')
            device = m.Device(uuid=row['uuid'], type=row['type'], vendor=row['vendor'],
                              model=row['model'], std_board_info=row.get('std_board_info'),
                              vendor_board_info=row.get('vendor_board_info'),
                              hostname=row['hostname'], status=status,
                              device_state=states.DEV_AVAILABLE,
                              imported_from=IMPORTED_FROM, created_at=row['created_at'],
                              updated_at=row.get('updated_at'))
            s.add(device)
            s.flush()
            c = m.ControlpathID(uuid=cpid['uuid'], device_id=device.id,
                                hostname=row['hostname'], cpid_type=cpid['cpid_type'],
                                cpid_info=info, created_at=cpid['created_at'],
                                updated_at=cpid.get('updated_at'))
            s.add(c)
            s.flush()
            self.ids['devices'][row['id']] = device.id
            self.ids['controlpath_ids'][cpid['id']] = c.id
            self.result.count('devices')
            self.result.count('controlpath_ids')
            self.say(f'device {device.uuid}: {row["type"]} {row["vendor"]} on '
                     f'{row["hostname"]} at {info}, {status}')

    # -- deployables -----------------------------------------------------------------------
    def _deployables(self, s):
        rows = self.data['deployables']
        created = []
        for row in rows:
            device_id = self.ids['devices'].get(row['device_id'])
            if device_id is None:
                continue
            dep = None if self.empty else s.execute(sa.select(m.Deployable).where(sa.or_(
                m.Deployable.uuid == row['uuid'],
                m.Deployable.name == row['name']))).scalars().first()
            if dep is not None:
                if dep.device_id != device_id or dep.rp_uuid != row.get('rp_uuid'):
                    self.conflict(f'deployable {row["name"]} ({row["uuid"]}): Steward\'s '
                                  f'{dep.uuid} of that name belongs elsewhere')
                self.ids['deployables'][row['id']] = dep.id
                self.result.count('deployables', kept=True)
                continue
            dep = m.Deployable(uuid=row['uuid'], name=row['name'],
                               num_accelerators=row['num_accelerators'],
                               device_id=device_id, rp_uuid=row.get('rp_uuid'),
                               driver_name=row.get('driver_name'),
                               bitstream_id=row.get('bitstream_id'),
                               created_at=row['created_at'],
                               updated_at=row.get('updated_at'))
            s.add(dep)
            s.flush()
            self.ids['deployables'][row['id']] = dep.id
            created.append((row, dep))
            self.result.count('deployables')
            self.say(f'deployable {dep.name} ({dep.uuid}): {dep.num_accelerators} '
                     f'accelerator(s), provider {dep.rp_uuid}')
        # Parents and roots once every row has its Steward id.
        for row, dep in created:
            for col in ('parent_id', 'root_id'):
                if row.get(col) is not None:
                    setattr(dep, col, self.ids['deployables'].get(row[col]))

    def _attributes(self, s):
        for row in self.data['attributes']:
            dep_id = self.ids['deployables'].get(row['deployable_id'])
            if dep_id is None:
                continue
            if not self.empty and s.execute(sa.select(m.Attribute.id).where(
                    sa.or_(m.Attribute.uuid == row['uuid'],
                           sa.and_(m.Attribute.deployable_id == dep_id,
                                   m.Attribute.key == row['key'])))).first():
                self.result.count('attributes', kept=True)
                continue
            s.add(m.Attribute(uuid=row['uuid'], deployable_id=dep_id, key=row['key'],
                              value=row['value'], created_at=row['created_at'],
                              updated_at=row.get('updated_at')))
            self.result.count('attributes')

    # -- attach handles --------------------------------------------------------------------
    def _steward_forms(self, dep_row, handles):
        """{Cyborg handle id: the attach info Steward's driver will report for it}."""
        device = self.rows['devices'][dep_row['device_id']]
        cpid = self.cpid_of.get(device['id'])
        if dep_row.get('driver_name') == 'fake' and cpid is not None \
                and self.fake_devices is not None:
            wanted = translation.fake_driver_infos(self.fake_devices(device['hostname']),
                                       cpid['cpid_info'], dep_row['name'])
            if wanted is not None:
                ordered = sorted(handles, key=lambda h: translation.address_order(h['attach_info']))
                if len(wanted) != len(ordered):
                    self.conflict(f'deployable {dep_row["name"]}: Cyborg has '
                                  f'{len(ordered)} handles, Steward\'s fake driver '
                                  f'reports {len(wanted)}')
                return {h['id']: info for h, info in zip(ordered, wanted)}
        return {h['id']: translation.steward_form(h) for h in handles}

    def _handles(self, s):
        by_dep = {}
        for h in self.data['attach_handles']:
            by_dep.setdefault(h['deployable_id'], []).append(h)
        holders = {a['attach_handle_id'] for a in self.data['extended_accelerator_requests']
                   if a.get('attach_handle_id') is not None and
                   a['state'] in (states.ARQ_BOUND, states.ARQ_DELETING)}
        for dep_row in self.data['deployables']:
            dep_id = self.ids['deployables'].get(dep_row['id'])
            handles = by_dep.get(dep_row['id'], [])
            if dep_id is None or not handles:
                continue
            forms = self._steward_forms(dep_row, handles)
            added = []
            for h in handles:
                form = forms.get(h['id'])
                in_use = bool(h.get('in_use'))
                if in_use and h['id'] not in holders:
                    self.warn(f'attach handle {h["uuid"]} ({h["attach_info"]}) is in use '
                              f'in Cyborg but no Bound ARQ holds it: imported free')
                    in_use = False
                existing = None if self.empty else s.execute(
                    sa.select(m.AttachHandle).where(
                        m.AttachHandle.uuid == h['uuid'])).scalar_one_or_none()
                if existing is None and self.merge is not None:
                    existing = next((x for x in s.execute(sa.select(m.AttachHandle).where(
                        m.AttachHandle.deployable_id == dep_id)).scalars()
                        if form in (x.attach_info, x.discovered_as)), None)
                if existing is not None:
                    if in_use and existing.in_use:
                        self.conflict(f'attach handle {h["uuid"]}: Steward\'s handle '
                                      f'{existing.uuid} at {form} is in use already')
                    elif in_use:
                        existing.in_use = True
                        if existing.attach_info != h['attach_info']:
                            existing.discovered_as = existing.attach_info
                            existing.attach_info = h['attach_info']
                    self.ids['attach_handles'][h['id']] = existing.id
                    self.result.count('attach_handles', kept=True)
                    continue
                cpid_id = self.ids['controlpath_ids'].get(h['cpid_id'])
                if cpid_id is None:
                    continue
                # In use: the instance was given Cyborg's attach info; it keeps it
                # until released (never change how a bound handle is attached).
                info = h['attach_info'] if in_use else form
                handle = m.AttachHandle(
                    uuid=h['uuid'], deployable_id=dep_id, cpid_id=cpid_id, in_use=in_use,
                    attach_type=h['attach_type'], attach_info=info,
                    discovered_as=form if in_use and form != info else None,
                    created_at=h['created_at'], updated_at=h.get('updated_at'))
                s.add(handle)
                added.append((h['id'], handle))
                self.result.count('attach_handles')
                if in_use or form != h['attach_info']:
                    self.say(f'attach handle {h["uuid"]}: {h["attach_info"]} -> '
                             f'{form}{" (in use: after release)" if in_use else ""}')
            # One flush per deployable (the ARQs need the ids), not one per handle.
            s.flush()
            for cyborg_id, handle in added:
                self.ids['attach_handles'][cyborg_id] = handle.id

    # -- ARQs --------------------------------------------------------------------------------
    @staticmethod
    def _arq_state(row):
        return states.ARQ_BIND_FAILED if row['state'] == states.ARQ_BIND_STARTED \
            else row['state']

    def _arqs(self, s):
        for row in self.data['extended_accelerator_requests']:
            if not self.empty and s.execute(sa.select(m.ExtARQ.id).where(
                    m.ExtARQ.uuid == row['uuid'])).first():
                self.result.count('extended_accelerator_requests', kept=True)
                continue
            dp_id = self.ids['device_profiles'].get(row['device_profile_id'])
            if dp_id is None:
                self.conflict(f'ARQ {row["uuid"]}: its device profile (id '
                              f'{row["device_profile_id"]}) is not in Cyborg\'s database')
                continue
            state = self._arq_state(row)
            handle_id = None
            if row.get('attach_handle_id') is not None and \
                    state in (states.ARQ_BOUND, states.ARQ_DELETING):
                handle_id = self.ids['attach_handles'].get(row['attach_handle_id'])
                if handle_id is None:
                    self.conflict(f'ARQ {row["uuid"]} ({state}): its attach handle is '
                                  f'not imported')
                    continue
            elif state == states.ARQ_BOUND:
                self.conflict(f'ARQ {row["uuid"]} is Bound without an attach handle')
                continue
            if state != row['state']:
                self.say(f'ARQ {row["uuid"]}: {row["state"]} -> {state} (a bind the '
                         f'switch cut off; Nova deletes it)')
            dep_id = self.ids['deployables'].get(row['deployable_id']) \
                if row.get('deployable_id') is not None else None
            if dep_id is None and handle_id is not None:
                # The release finds the device through it.
                dep_id = s.get(m.AttachHandle, handle_id).deployable_id
            s.add(m.ExtARQ(uuid=row['uuid'], project_id=row.get('project_id'), state=state,
                           device_profile_id=dp_id,
                           device_profile_group_id=row.get('device_profile_group_id') or 0,
                           hostname=row.get('hostname'),
                           device_rp_uuid=row.get('device_rp_uuid'),
                           instance_uuid=row.get('instance_uuid'),
                           attach_handle_id=handle_id, deployable_id=dep_id,
                           created_at=row['created_at'], updated_at=row.get('updated_at')))
            self.result.count('extended_accelerator_requests')
            if handle_id is not None:
                self.say(f'ARQ {row["uuid"]}: {state}, instance {row.get("instance_uuid")}'
                         f', handle {self._handle_uuid(row["attach_handle_id"])}')

    def _handle_uuid(self, cyborg_id):
        row = self.rows['attach_handles'].get(cyborg_id)
        return row and row['uuid']

    def _device_states(self, s):
        """Allocated when a handle is in use (Cyborg left such devices available)."""
        s.flush()
        device_ids = list(set(self.ids['devices'].values()))
        if not device_ids:
            return
        in_use = dict(s.execute(
            sa.select(m.Deployable.device_id, sa.func.count())
            .join(m.AttachHandle, m.AttachHandle.deployable_id == m.Deployable.id)
            .where(m.Deployable.device_id.in_(device_ids),
                   m.AttachHandle.in_use.is_(True))
            .group_by(m.Deployable.device_id)).all())
        for device_id, count in sorted(in_use.items()):
            device = s.get(m.Device, device_id)
            if device.device_state != states.DEV_AVAILABLE:
                continue
            transitions.advance(s, m.Device, device, states.DEV_ALLOCATED, event='bind',
                           reason=f'imported from Cyborg with {count} attach handle(s) '
                                  f'in use', actor=ACTOR)
            self.say(f'device {device.uuid}: allocated ({count} handle(s) in use; '
                     f'Cyborg said available)')


class _Rollback(Exception):
    """A dry run, or nothing to write: the transaction is rolled back."""


def run(database, cyborg_url, dry_run=False, merge=None, placement=None,
        fake_devices=None):
    """The import, in one transaction; returns its Result. Raises
    CyborgImportError with nothing written. The Placement writes come last, before
    the commit: a failure there rolls the database back, and a trait already added
    makes no write on the next run. ``fake_devices(host)``: what Steward's fake
    driver reports on ``host`` (the command passes it: the database layer imports
    no driver); without it a fake deployable's handles are normalised like any
    other driver's."""
    if merge is not None and merge not in MERGE_POLICIES:
        raise exception.CyborgImportRefused(
            reason=f'unknown merge policy {merge!r} (known: {", ".join(MERGE_POLICIES)})')
    revision, data, not_carried = source.read_cyborg(cyborg_url)
    importer = Importer(revision, data, not_carried, merge=merge,
                        fake_devices=fake_devices)
    result = importer.result
    try:
        with database.writer() as s:
            importer.run(s)
            if placement is not None:
                # With conflicts, only said: the import will not happen.
                providers.adopt_providers(placement, data, dry_run or bool(result.conflicts),
                                result)
            if result.conflicts:
                raise exception.CyborgImportConflict(
                    count=len(result.conflicts), conflicts='; '.join(result.conflicts))
            if dry_run or result.already_imported:
                raise _Rollback()
    except _Rollback:
        pass
    except exception.CyborgImportError as err:
        err.result = result         # the command prints the plan with the error
        raise
    return result

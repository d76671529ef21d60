"""At most one device of a host holds a control-path id (migration 0005's unique
index), also while drives change slots: the report releases an id before another
device takes it."""
import pytest
import sqlalchemy as sa

from steward.db import models as m
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)

# On every database Steward runs on (tests/conftest.py ``db``).
pytestmark = pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)

SLOT_A, SLOT_B = '0000:0a:00.0', '0000:0b:00.0'
DRIVE_1 = ('SN-1', 'nqn.2014-08.org.example:ctrl-1')
DRIVE_2 = ('SN-2', 'nqn.2014-08.org.example:ctrl-2')


def _addresses(database):
    with database.reader() as s:
        rows = s.execute(sa.select(m.Device.identity, m.ControlpathID.cpid_info,
                                   m.ControlpathID.hostname)
                         .join(m.ControlpathID, m.ControlpathID.device_id == m.Device.id)
                         ).all()
    return {ident.split(':')[1]: (info, host) for ident, info, host in rows}


def test_two_drives_swapping_slots_keep_their_rows(database, life):
    life.driver.slots = {SLOT_A: DRIVE_1, SLOT_B: DRIVE_2}
    st = life.start()
    before = {d['uuid'] for d in st.devices()}
    at = _addresses(database)
    life.driver.slots = {SLOT_A: DRIVE_2, SLOT_B: DRIVE_1}
    st.discover()
    assert {d['uuid'] for d in st.devices()} == before
    swapped = _addresses(database)
    assert swapped['SN-1'] == at['SN-2'] and swapped['SN-2'] == at['SN-1']
    assert {host for _, host in swapped.values()} == {life.host}


def test_a_missing_drive_gives_its_address_to_the_drive_in_its_slot(database, life):
    st = life.start()
    dev = st.device()
    inst, _ = st.bind(dev)                   # in use: kept when it vanishes
    at = _addresses(database)['SN-1']
    life.driver.slots = {SLOT_A: DRIVE_2}
    st.discover()
    addresses = _addresses(database)
    assert addresses['SN-2'] == at
    assert addresses['SN-1'] == (m.released_cpid(dev['uuid']), life.host)
    assert st.device(dev['uuid'])['missing'] is True
    life.driver.slots = {SLOT_A: DRIVE_2, SLOT_B: DRIVE_1}    # back elsewhere
    st.discover()
    assert _addresses(database)['SN-1'][0] != m.released_cpid(dev['uuid'])
    assert st.device(dev['uuid'])['missing'] is False

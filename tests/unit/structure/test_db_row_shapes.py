"""The database layer answers in one documented row shape per resource: each
resource module of steward/db declares ``ROW`` (an ORM object, or a plain object
that transitions.advance() updates), the one shape its callers read and change;
every public function's return annotation names only it, records (``dict``) or
plain values. A second declared shape (``READ_ROW``, a named tuple of the same
columns for a listing) is a violation. Read with ``ast``, and checked against
rows the functions return on a real database."""
import ast
import importlib
import pathlib

import pytest

from steward.common import states
from steward.db import arqs as arq_db
from steward.db import attach_handles as handle_db
from steward.db import attributes as attribute_db
from steward.db import deployables as deployable_db
from steward.db import device_history as history_db
from steward.db import device_profiles as profile_db
from steward.db import devices as device_db
from steward.db import erase_records as erase_db
from steward.db import models as m
from steward.db import transitions

DB = pathlib.Path(importlib.import_module('steward.db').__file__).parent
RESOURCES = ('arqs', 'attach_handles', 'attributes', 'deployables', 'device_history',
             'device_profiles', 'devices', 'discoveries', 'erase_records',
             'host_reports')
# Not resources: the machinery every resource module shares.
SHARED = {'__init__', 'models', 'session', 'sqlite', 'retry', 'migration',
          'data_migrations', 'transitions', 'perf', 'query'}
SHAPES = {'ROW'}
PLAIN = {'dict', 'list', 'tuple', 'set', 'int', 'str', 'bool', 'None'}


def shape_violations(source):
    """What in ``source`` (a resource module) breaks the rule."""
    tree = ast.parse(source)
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    declared = assigned & SHAPES
    found = [] if 'ROW' in declared else ['no ROW declared']
    # Another module-level name of a row shape: ROW's own spelling with more to it.
    found += [f'{name} declared: a second row shape' for name in sorted(assigned)
              if name != 'ROW' and name.endswith('_ROW')]
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith('_'):
            continue
        if node.returns is None:
            found.append(f'{node.name}() has no return annotation')
            continue
        names = {n.id for n in ast.walk(node.returns) if isinstance(n, ast.Name)}
        names |= {'None' for n in ast.walk(node.returns)
                  if isinstance(n, ast.Constant) and n.value is None}
        if any(isinstance(n, ast.Attribute) for n in ast.walk(node.returns)):
            found.append(f'{node.name}() names a type of its own: '
                         f'{ast.unparse(node.returns)}')
            continue
        for name in sorted(names - PLAIN - declared):
            found.append(f'{node.name}() returns {name}, not a declared row shape')
    return found


def test_a_second_row_shape_is_found():
    found = shape_violations(
        'ROW = m.Device\n'
        'def a(s) -> list[ROW]: ...\n'
        'def b(s) -> m.Deployable: ...\n'
        'def c(s) -> Other: ...\n'
        'def d(s): ...\n'
        'def _e(s) -> m.Device: ...\n')
    assert found == ['b() names a type of its own: m.Deployable',
                     'c() returns Other, not a declared row shape',
                     'd() has no return annotation']
    assert shape_violations('def a(s) -> int: ...\n') == ['no ROW declared']
    assert shape_violations(
        'ROW = m.Device\n'
        'READ_ROW = perf.row_type(m.Device.__table__)\n'
        'def a(s) -> list[ROW]: ...\n'
        'def b(s) -> list[READ_ROW]: ...\n') == [
        'READ_ROW declared: a second row shape',
        'b() returns READ_ROW, not a declared row shape']


def test_every_module_of_the_database_layer_is_known():
    modules = {p.stem for p in DB.glob('*.py')}
    assert modules == set(RESOURCES) | SHARED, modules ^ (set(RESOURCES) | SHARED)


@pytest.mark.parametrize('resource', RESOURCES)
def test_each_resource_answers_in_its_declared_shapes(resource):
    source = (DB / f'{resource}.py').read_text()
    assert shape_violations(source) == []
    doc = ast.get_docstring(ast.parse(source))
    assert '``ROW``' in doc, f'steward/db/{resource}.py: its docstring says its ROW'


def test_the_rows_returned_are_the_declared_shapes(database, db):
    """Rows read back from a real database are of the shapes declared."""
    with database.writer() as s:
        dp = profile_db.device_profile_create(s, 'dp1', [{'resources:FPGA': '1'}])
        assert isinstance(dp, profile_db.ROW)
        dev = m.Device(uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f01', type='FPGA',
                       vendor='v', model='m', hostname='h', status='enabled',
                       device_state=states.DEV_AVAILABLE)
        s.add(dev)
        s.flush()
        dep = m.Deployable(uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f02', name='h_dep',
                           num_accelerators=1, device_id=dev.id,
                           rp_uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f03')
        s.add(dep)
        s.flush()
        cpid = m.ControlpathID(uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f05',
                               device_id=dev.id, hostname='h', cpid_type='PCI',
                               cpid_info='{}')
        s.add(cpid)
        s.flush()
        s.add(m.AttachHandle(uuid='6a0b0a5e-08f3-4b7e-9a55-4b4a2a6f2f04',
                             deployable_id=dep.id, cpid_id=cpid.id, attach_type='PCI',
                             attach_info='{}', in_use=False))
        attr = attribute_db.attribute_create(s, dep.id, 'rc', 'FPGA')
        assert isinstance(attr, attribute_db.ROW)
        records = arq_db.arqs_create(s, dp, [0], 'p')
        assert all(isinstance(r, dict) for r in records)
        rec = erase_db.erase_record_create(s, dev.uuid, status=states.ERASE_RUNNING)
        assert isinstance(rec, erase_db.ROW)
    with database.writer() as s:
        assert isinstance(handle_db.attach_handle_allocate(s, dep), handle_db.ROW)
        transitions.advance(s, m.Device, device_db.device_get(s, dev.uuid),
                            states.DEV_ALLOCATED, event='bind')
    with database.reader() as s:
        assert all(isinstance(r, device_db.ROW) for r in device_db.device_list(s))
        listed = device_db.device_records(s)
        assert all(type(r) is dict for r in listed)
        # The same columns in one order (times as the driver gives them: see perf.untyped).
        assert [list(r) for r in listed] == [
            list(device_db.device_record(r)) for r in device_db.device_list(s)]
        assert isinstance(deployable_db.deployable_get(s, dep.uuid), deployable_db.ROW)
        assert all(isinstance(r, deployable_db.ROW) for r in deployable_db.deployable_list(s))
        assert all(isinstance(r, deployable_db.ROW) for members in
                   deployable_db.deployables_by_rp_uuids(s, [dep.rp_uuid])[0].values()
                   for r in members)
        assert [type(r) for r in deployable_db.deployable_records(s)] == [dict]
        assert isinstance(profile_db.device_profile_get(s, name='dp1'), profile_db.ROW)
        assert [r['name'] for r in profile_db.device_profile_records(s, ['dp1'])] == ['dp1']
        assert all(isinstance(r, arq_db.ROW) for r in arq_db.arq_list(s))
        assert all(isinstance(r, attribute_db.ROW) for r in attribute_db.attribute_list(s))
        assert all(isinstance(r, erase_db.ROW)
                   for r in erase_db.erase_record_list(s, dev.uuid))
        history = history_db.device_history_list(s, dev.uuid)
        assert len(history) == 1 and isinstance(history[0], history_db.ROW)
    with database.single_read() as conn:
        assert profile_db.device_profile_records(conn) == [
            profile_db.device_profile_record(dp)]

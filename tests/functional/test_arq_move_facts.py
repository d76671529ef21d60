"""Microversion 2.7: how a Bound ARQ's device may move (attach_handle_info
.live_migratable, .cold_migratable, .move_refusal), per driver.

The real drivers (pci on a fake SR-IOV sysfs tree, mdev on a fake mdev tree, the
fake driver, and the NVMe stand-in of lifecycle_stack, which reports what the NVMe
driver reports), the real agent and conductor on every database, the real
Placement, and the v2 API over ASGI. The ``live_migratable`` tag is compared with
Nova 34's own parsing (nova/pci/devspec.py) run in .venv-nova.
"""
import json
import logging
import os
import subprocess
import uuid

import pytest
from starlette import testclient

from steward.agent.manager import AgentManager
from steward.common import moves
from steward.conductor.local_api import LocalConductorAPI
from steward.db import deployables as deployable_db
from steward.db import models as m
from steward.drivers.mdev import driver as mdev
from steward.drivers.pci import driver as pci
from steward.drivers.pci.driver import PciDriver
from tests.fixtures import placement_fixture
from tests.fixtures import requirements
from tests.fixtures import roots
from tests.functional import conductor_fixtures as cf
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)
from tests.fixtures.mdev_tree import MTTY_TYPES, MdevTree
from tests.fixtures.stack import ROOT
from tests.fixtures.sysfs_tree import make_sriov

URL = '/v2/accelerator_requests'
RC = 'CUSTOM_PCI_10DE_25B6'
TAGGED, UNTAGGED = '0000:25:00.4', '0000:25:00.5'
MOVE_KEYS = {'live_migratable', 'cold_migratable', 'move_refusal'}
NOT_TAGGED_PCI = 'PCI device not tagged live_migratable in [pci] device_spec'
NOT_TAGGED_MDEV = 'mdev device not tagged live_migratable in [mdev] device_spec'


pytestmark = pytest.mark.usefixtures('parsed_conf')


@pytest.fixture
def placement():
    return placement_fixture.client_and_server()


@pytest.fixture
def host():
    return placement_fixture.unique_name('mv')



def _api(conductor, database):
    return testclient.TestClient(roots.api_app(LocalConductorAPI(conductor), database),
                                 raise_server_exceptions=False)


def _boot(api, server, host, rp, rc, profile):
    """Nova's sequence: allocation, ARQ, bind. Returns (instance, ARQ uuid)."""
    names = [p['name'] for p in api.get('/v2/device_profiles').json()['device_profiles']]
    if profile not in names:
        r = api.post('/v2/device_profiles', json=[{'name': profile, 'groups': [
            {f'resources:{rc}': '1'}]}])
        assert r.status_code == 201, r.text
    arq = api.post(URL, json={'device_profile_name': profile}).json()['arqs'][0]['uuid']
    inst = str(uuid.uuid4())
    placement_fixture.allocate(server.url, inst, rp, rc)
    r = api.patch(URL, json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': rp},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
    assert r.status_code == 202, r.text
    return inst, arq


def _views(api, arq, inst, version):
    """Every read Nova or a user makes of one ARQ, at ``version``."""
    h = {'OpenStack-API-Version': f'accelerator {version}'}
    one = api.get(f'{URL}/{arq}', headers=h)
    resolved = api.get(URL, params={'instance': inst, 'bind_state': 'resolved'},
                       headers=h)
    listed = api.get(URL, headers=h)
    assert one.status_code == resolved.status_code == listed.status_code == 200
    docs = [one.json(), resolved.json()['arqs'][0]] + [
        a for a in listed.json()['arqs'] if a['uuid'] == arq]
    assert len(docs) == 3 and all(d['state'] == 'Bound' for d in docs)
    return docs


def _infos(api, arq, inst, version):
    return [d['attach_handle_info'] for d in _views(api, arq, inst, version)]


# -- pci driver ------------------------------------------------------------------------
@pytest.fixture
def sriov_tree(tmp_path):
    root = tmp_path / 'sys'
    make_sriov(root, '0000:25:00.0', '0x10de', '0x2236', [TAGGED, UNTAGGED],
               vf_product='0x25b6', vf_driver='vfio-pci')
    return root


def _configure_pci(conf, root, *entries):
    conf.set_override('sysfs_root', str(root))
    conf.set_override('device_spec', [json.dumps(e) for e in entries], group='pci')


def _pci_handles(database):
    with database.reader() as s:
        rows = s.query(m.AttachHandle).all()
    out = {}
    for h in rows:
        info = json.loads(h.attach_info)
        out[f"{info['domain']}:{info['bus']}:{info['device']}.{info['function']}"] = (
            h, info)
    return out


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_pci_arqs_say_live_migratable_from_their_tag_at_2_7(transport, database, db, conf,
                                                            placement, host, sriov_tree):
    client, server = placement
    _configure_pci(conf, sriov_tree,
                   {'address': TAGGED, 'managed': 'no', 'live_migratable': 'yes'},
                   {'vendor_id': '10de', 'product_id': '25b6'})
    conductor, _ = cf.stack(database, transport, conf, client, host=host,
                            drivers=[PciDriver(conf, host)])
    stored = {a: i for a, (_, i) in _pci_handles(database).items()}
    # Stored where managed is, and only when true.
    assert stored[TAGGED][moves.LIVE_KEY] is True
    assert moves.LIVE_KEY not in stored[UNTAGGED]
    with database.reader() as s:
        rps = {a: d.rp_uuid for d in deployable_db.deployable_list(s)
               for a in (TAGGED, UNTAGGED) if d.name == f'{host}_{a}'}
    with _api(conductor, database) as api:
        booted = {a: _boot(api, server, host, rps[a], RC, 'vf') for a in rps}
        for addr in rps:
            inst, arq = booted[addr][0], booted[addr][1]
            for version in ('2.0', '2.4', '2.6'):
                for info in _infos(api, arq, inst, version):
                    assert not MOVE_KEYS & set(info), (version, info)
                    assert moves.LIVE_KEY not in info
            for version in ('2.7', 'latest'):
                for info in _infos(api, arq, inst, version):
                    assert info['cold_migratable'] is True
                    assert info['managed'] is (addr != TAGGED)
                    if addr == TAGGED:
                        assert info['live_migratable'] is True
                        assert 'move_refusal' not in info
                    else:
                        assert info['live_migratable'] is False
                        assert info['move_refusal'] == NOT_TAGGED_PCI


@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_a_tag_set_later_keeps_the_handles_and_waits_for_bound_ones(transport, database, db,
        conf, placement, host, sriov_tree, caplog):
    """Handles discovered before the tag existed mean false; tagging the entry later
    updates free handles in place (same uuids) and a bound one once released."""
    client, server = placement
    _configure_pci(conf, sriov_tree, {'vendor_id': '10de', 'product_id': '25b6'})
    conductor, _ = cf.stack(database, transport, conf, client, host=host,
                            drivers=[PciDriver(conf, host)])
    before = _pci_handles(database)
    with database.reader() as s:
        rp = next(d.rp_uuid for d in deployable_db.deployable_list(s)
                  if d.name == f'{host}_{TAGGED}')
    with _api(conductor, database) as api:
        inst, arq = _boot(api, server, host, rp, RC, 'vf')
        _configure_pci(conf, sriov_tree, {'vendor_id': '10de', 'product_id': '25b6',
                                          'live_migratable': True})
        agent = AgentManager(conf, LocalConductorAPI(conductor), host=host,
                             drivers=[PciDriver(conf, host)])
        agent.init_host()
        agent.run_cycle()
        after = _pci_handles(database)
        assert {a: h.uuid for a, (h, _) in after.items()} == {
            a: h.uuid for a, (h, _) in before.items()}
        assert after[UNTAGGED][1][moves.LIVE_KEY] is True         # free: updated
        assert moves.LIVE_KEY not in after[TAGGED][1]             # bound: as bound
        for info in _infos(api, arq, inst, '2.7'):
            assert (info['live_migratable'], info['cold_migratable']) == (False, True)
        assert api.delete(f'{URL}?instance={inst}').status_code == 204
        agent.run_cycle()
        assert _pci_handles(database)[TAGGED][1][moves.LIVE_KEY] is True


@pytest.mark.parametrize('value', ['maybe', 2, 1.0, [], {}, ''])
def test_a_bad_pci_tag_withholds_the_devices_with_a_clear_error(transport, database, conf,
        placement, host, sriov_tree, caplog, value):
    client, _ = placement
    entry = {'address': TAGGED, 'live_migratable': value}
    _configure_pci(conf, sriov_tree, entry, {'vendor_id': '10de', 'product_id': '25b6'})
    with caplog.at_level(logging.ERROR, logger='steward.drivers.pci'):
        cf.stack(database, transport, conf, client, host=host,
                 drivers=[PciDriver(conf, host)])
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR and r.name == 'steward.drivers.pci.driver']
    assert len(errors) == 1, errors
    assert json.dumps(entry) in errors[0]
    assert f'live_migratable {json.dumps(value)} is not a boolean' in errors[0]
    assert 'cyb.config.invalid' in errors[0]
    # The tagged device is withheld, not handed to the later, broader entry.
    assert set(_pci_handles(database)) == {UNTAGGED}


def test_the_tag_is_parsed_as_nova_34_parses_its_own():
    """Every value through Steward's parser and through Nova 34's
    PciDeviceSpec (.venv-nova): the same boolean, or both refuse."""
    python = os.path.join(ROOT, '.venv-nova', 'bin', 'python')
    if not os.path.exists(python):
        requirements.need('nova', f'{python} does not exist (tools/nova-series.sh venv)')
    values = [True, False, 'true', 'False', 'YES', 'no', 'on', 'Off', 'y', 'N', 't', 'f',
              '1', '0', 1, 0, ' yes ', None, 2, -1, 1.0, 'maybe', '', 'truthy', [], {}]
    script = (
        'import json, sys\n'
        'from nova.pci import devspec\n'
        'out = []\n'
        'for v in json.load(sys.stdin):\n'
        '    try:\n'
        '        spec = devspec.PciDeviceSpec({"vendor_id": "10de", '
        '"product_id": "25b6", "live_migratable": v})\n'
        '        out.append(spec.tags.get("live_migratable", "false") == "true")\n'
        '    except Exception as err:\n'
        '        out.append(type(err).__name__)\n'
        'print(json.dumps(out))\n')
    run = subprocess.run([python, '-c', script], input=json.dumps(values),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    nova = json.loads(run.stdout.strip().splitlines()[-1])
    ours = []
    for value in values:
        try:
            ours.append(pci.parse_live_migratable({'live_migratable': value}))
        except ValueError:
            ours.append('PciConfigInvalidSpec')
    assert dict(zip(map(repr, values), ours)) == dict(zip(map(repr, values), nova))
    assert pci.parse_live_migratable({}) is False


# -- mdev driver -------------------------------------------------------------------------
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_mdev_arqs_say_live_migratable_from_their_tag_at_2_7(transport, database, db, conf,
                                                             placement, host, tmp_path,
                                                             caplog):
    client, server = placement
    tree = MdevTree(tmp_path / 'sys')
    tree.add_virtual_parent('mtty', MTTY_TYPES)
    conf.set_override('sysfs_root', str(tree.root))
    bad = {'address': 'mtty', 'mdev_type': 'mtty-1', 'live_migratable': 'sometimes'}
    conf.set_override('device_spec', [
        json.dumps({'address': 'mtty', 'mdev_type': 'mtty-1', 'live_migratable': 'On'}),
        json.dumps({'address': 'mtty', 'mdev_type': 'mtty-2'}),
        json.dumps(bad)], group='mdev')
    with caplog.at_level(logging.ERROR, logger='steward.drivers.mdev'):
        conductor, _ = cf.stack(database, transport, conf, client, host=host,
                                drivers=[mdev.MdevDriver(conf, host)])
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR and r.name == 'steward.drivers.mdev.driver']
    assert len(errors) == 1 and json.dumps(bad) in errors[0]
    assert 'live_migratable "sometimes" is not a boolean' in errors[0]
    with database.reader() as s:
        rps = {t: d.rp_uuid for d in deployable_db.deployable_list(s)
               for t in ('mtty-1', 'mtty-2') if d.name == f'{host}_mdev_mtty_{t}'}
    with _api(conductor, database) as api:
        for type_name, live in (('mtty-1', True), ('mtty-2', False)):
            rc = mdev.default_resource_class(type_name)
            inst, arq = _boot(api, server, host, rps[type_name], rc, f'dp-{type_name}')
            for info in _infos(api, arq, inst, '2.6'):
                assert set(info) == {'asked_type', 'domain', 'bus', 'device', 'function'}
            for info in _infos(api, arq, inst, '2.7'):
                assert info['asked_type'] == type_name
                assert (info['live_migratable'], info['cold_migratable']) == (live, True)
                assert info.get('move_refusal') == (None if live else NOT_TAGGED_MDEV)
                assert 'managed' not in info


# -- fake driver (TEST_PCI) ---------------------------------------------------------------
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_fake_driver_arqs_follow_the_pci_rule_with_no_tag(transport, database, db, conf):
    conductor, _ = cf.stack(database, transport, conf)
    cf.make_profile(database)
    arq = conductor.arq_create(cf.admin(), 'dp1', 'p')[0]
    inst = str(uuid.uuid4())
    conductor.arq_bind(cf.admin(), [{'uuid': arq['uuid'], 'hostname': 'host-a',
                                     'device_rp_uuid': cf.deployable(database).rp_uuid,
                                     'instance_uuid': inst}])
    with _api(conductor, database) as api:
        for info in _infos(api, arq['uuid'], inst, '2.7'):
            assert info == {'domain': '0000', 'bus': '0c', 'device': info['device'],
                            'function': '0', 'live_migratable': False,
                            'cold_migratable': True,
                            'move_refusal': 'fake driver device (TEST_PCI): not '
                                            'live_migratable'}
        # An ARQ without a handle has none of it.
        other = api.post(URL, json={'device_profile_name': 'dp1'},
                         headers={'OpenStack-API-Version': 'accelerator 2.7'})
        assert other.json()['arqs'][0]['attach_handle_info'] == {}


# -- NVMe ----------------------------------------------------------------------------------
@pytest.mark.parametrize('db', ['sqlite', 'postgresql', 'mysql'], indirect=True)
def test_nvme_arqs_refuse_every_move_with_the_reason(database, db, life):
    st = life.start()
    dev = st.device()
    assert dev['type'] == 'NVME'
    inst, arq = st.bind(dev)
    for info in _infos(st.api, arq, inst, '2.7'):
        assert info['live_migratable'] is False and info['cold_migratable'] is False
        assert info['move_refusal'] == ("NVMe device: the namespace holds the tenant's "
                                        "data, which a move does not carry")
        assert info['managed'] is True       # a PCI handle: 2.4's key as before
    for info in _infos(st.api, arq, inst, '2.6'):
        assert not MOVE_KEYS & set(info)

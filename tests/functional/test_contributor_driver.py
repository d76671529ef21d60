"""The toy driver of doc/contributor/drivers.md, run as it is printed.

Its block is written as a module with an installed distribution's entry point
under ``steward.drivers``, loaded by name as the agent loads any driver
(steward/agent/drivers.py ``load()``, stevedore), then run against the real
conductor, database and Placement (tests/functional/lifecycle_stack.py): its
device, deployable and Placement inventory appear, and Nova's bind and delete work
on it through the v2 API."""
import pathlib
import re
import sys
import uuid

import pytest

from steward.agent import drivers as agent_drivers
from tests.fixtures import placement_fixture
from tests.functional.lifecycle_stack import life  # noqa: F401 (fixture)

DOC = pathlib.Path(__file__).resolve().parents[2] / 'doc' / 'contributor' / 'drivers.md'
MODULE_BLOCK = re.compile(r'^<!-- module: (\S+) -->\n```python\n(.*?)^```', re.M | re.S)
RC = 'CUSTOM_TOY'
URL = '/v2/accelerator_requests'


@pytest.fixture
def toy_site(tmp_path, monkeypatch):
    """A directory on sys.path holding the page's module and the dist-info that
    declares it under steward.drivers, as ``pip install`` of a driver leaves it;
    sys.path and sys.modules are restored after. stevedore reads entry points
    through two caches of its own that a long test process (and earlier runs)
    filled: the file cache in ~/.cache and ExtensionManager's class-wide
    ENTRY_POINT_CACHE, which keeps a namespace's list from the first load in the
    process (CI said "unknown driver 'toy'" here after another test of the same
    worker had loaded a driver). Fresh ones, in this test's directory, are what an
    agent started after the install reads."""
    from stevedore import _cache
    from stevedore import extension
    monkeypatch.setattr(_cache, 'get_group_all',
                        _cache.Cache(str(tmp_path / 'entrypoints')).get_group_all)
    monkeypatch.setattr(extension.ExtensionManager, 'ENTRY_POINT_CACHE', {})
    ((filename, code),) = MODULE_BLOCK.findall(DOC.read_text())
    module = filename.removesuffix('.py')
    site = tmp_path / 'site'
    site.mkdir()
    (site / filename).write_text(code)
    info = site / f'{module}-1.0.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n')
    (info / 'entry_points.txt').write_text(f'[steward.drivers]\ntoy = {module}:ToyDriver\n')
    saved = list(sys.path)
    sys.path.insert(0, str(site))
    yield module
    sys.path[:] = saved
    sys.modules.pop(module, None)


def _traits(url, rp_uuid):
    with placement_fixture.admin_session(url) as s:
        r = s.get(f'/resource_providers/{rp_uuid}/traits')
        assert r.status_code == 200, r.text
        return set(r.json()['traits'])


def test_the_toy_driver_of_the_contributor_page_runs(life, conf, toy_site, tmp_path):
    board = tmp_path / 'sys' / 'class' / 'toy' / 'board0'
    board.mkdir(parents=True)
    (board / 'slots').write_text('4\n')
    conf.set_override('sysfs_root', str(tmp_path / 'sys'))

    (driver,) = agent_drivers.load(['toy'], conf, life.host)
    assert (type(driver).__module__, driver.name) == (toy_site, 'toy')
    life.driver = driver
    st = life.start()               # the agent: init_host, then one discovery

    dev = st.device()
    assert (dev['type'], dev['vendor'], dev['model'], dev['hostname'],
            dev['device_state']) == ('GENERIC', '0x1234', 'toy', life.host, 'available')
    dep = st.deployable(dev)
    assert (dep['name'], dep['num_accelerators'], dep['driver_name']) == (
        f'{life.host}_toy_board0', 4, 'toy')
    inventory = st.inventory(dep['rp_uuid'], rc=RC)
    assert (inventory['total'], inventory['reserved']) == (4, 0)
    assert {'CUSTOM_TOY_DEVICE', 'OWNER_CYBORG'} <= _traits(st.placement_url,
                                                             dep['rp_uuid'])

    # Nova: a profile, an ARQ, the scheduler's allocation, the bind.
    r = st.api.post('/v2/device_profiles',
                    json=[{'name': 'toy', 'groups': [{f'resources:{RC}': '1'}]}])
    assert r.status_code == 201, r.text
    r = st.api.post(URL, json={'device_profile_name': 'toy'})
    assert r.status_code == 201, r.text
    arq = r.json()['arqs'][0]['uuid']
    inst = str(uuid.uuid4())
    placement_fixture.allocate(st.placement_url, inst, dep['rp_uuid'], RC)
    r = st.api.patch(URL, json={arq: [
        {'op': 'add', 'path': '/hostname', 'value': life.host},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': dep['rp_uuid']},
        {'op': 'add', 'path': '/instance_uuid', 'value': inst}]})
    assert r.status_code == 202, r.text
    bound = st.api.get(f'{URL}/{arq}').json()
    assert (bound['state'], bound['attach_handle_type']) == ('Bound', 'TEST_PCI')
    assert bound['attach_handle_info']['device'] == 'board0'
    assert bound['attach_handle_info']['slot'] in range(4)
    assert st.device(dev['uuid'])['device_state'] == 'allocated'

    # Nova deletes the instance: its allocation, then its ARQs.
    with placement_fixture.admin_session(st.placement_url) as s:
        assert s.delete(f'/allocations/{inst}').status_code == 204
    r = st.api.delete(f'{URL}?instance={inst}')
    assert r.status_code == 204, r.text
    assert st.api.get(f'{URL}/{arq}').status_code == 404
    # GENERIC needs no cleaning: back to available at once, nothing reserved.
    assert st.device(dev['uuid'])['device_state'] == 'available'
    assert st.inventory(dep['rp_uuid'], rc=RC)['reserved'] == 0

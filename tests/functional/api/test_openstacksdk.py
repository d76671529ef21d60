"""openstacksdk, unchanged, against a real uvicorn server."""
import uuid

import openstack
import pytest
from openstack import exceptions as sdk_exc


@pytest.fixture
def conn(server):
    c = openstack.connect(auth_type='none', accelerator_endpoint_override=f'{server}/v2',
                          load_yaml_config=False, load_envvars=False)
    yield c
    c.close()


def test_sdk_lists_and_gets(conn, seed):
    devices = list(conn.accelerator.devices())
    assert [d.id for d in devices] == [seed['device']]
    assert devices[0].type == 'FPGA' and devices[0].hostname == 'host-a'
    assert conn.accelerator.get_device(seed['device']).vendor == '0xABCD'
    deployables = list(conn.accelerator.deployables())
    assert [d.id for d in deployables] == [seed['deployable']]
    assert deployables[0].num_accelerators == 16
    assert conn.accelerator.get_deployable(seed['deployable']).name == 'host-a_FakeDevice'
    assert list(conn.accelerator.device_profiles()) == []


def test_sdk_error_details(conn):
    missing = str(uuid.uuid4())
    with pytest.raises(sdk_exc.NotFoundException) as err:
        conn.accelerator.get_device(missing)
    assert err.value.details == f'Device not found with uuid={missing}'
    with pytest.raises(sdk_exc.BadRequestException) as err:
        conn.accelerator.get_deployable('missing')
    assert err.value.details == \
        "Expected a UUID for deployable uuid but received 'missing'."


def test_sdk_profile_and_arq_lifecycle(conn, seed):
    dp = conn.accelerator.create_device_profile(
        name='dp2', groups=[{'resources:FPGA': '1'}], description='d')
    assert dp.name == 'dp2' and dp.groups == [{'resources:FPGA': '1'}]
    assert [p.name for p in conn.accelerator.device_profiles()] == ['dp2']
    assert conn.accelerator.get_device_profile(dp.id).name == 'dp2'
    arq = conn.accelerator.create_accelerator_request(device_profile_name='dp2')
    assert arq.state == 'Initial' and arq.device_profile_group_id == 0
    instance = str(uuid.uuid4())
    conn.accelerator.update_accelerator_request(arq.id, [
        {'op': 'add', 'path': '/hostname', 'value': 'host-a'},
        {'op': 'add', 'path': '/device_rp_uuid', 'value': seed['rp']},
        {'op': 'add', 'path': '/instance_uuid', 'value': instance}])
    got = conn.accelerator.get_accelerator_request(arq.id)
    assert got.state == 'Bound' and got.instance_uuid == instance
    assert got.attach_handle_type == 'TEST_PCI'
    assert [a.id for a in conn.accelerator.accelerator_requests()] == [arq.id]
    conn.accelerator.delete_accelerator_request(arq.id)
    assert list(conn.accelerator.accelerator_requests()) == []
    conn.accelerator.delete_device_profile(dp.id)
    assert list(conn.accelerator.device_profiles()) == []


def test_sdk_with_microversion(server, seed):
    c = openstack.connect(auth_type='none', accelerator_endpoint_override=f'{server}/v2',
                          accelerator_default_microversion='2.3',
                          load_yaml_config=False, load_envvars=False)
    try:
        dev = c.accelerator.get_device(seed['device'])
        assert dev.status == 'enabled'
        c.accelerator.create_device_profile(name='byname', groups=[{'resources:FPGA': 1}])
        assert c.accelerator.get_device_profile('byname').name == 'byname'
    finally:
        c.close()

"""Flavor + device profile -> Placement granular request (spec 3)."""
import pytest

from steward.common import exception
from steward.compute import request


def flavor(**extra_specs):
    return request.parse_flavor({'name': 'f1', 'vcpus': 2, 'ram': 512, 'disk': 1,
                                 'extra_specs': extra_specs})


PROFILE = {'name': 'dp1', 'groups': [
    {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required',
     'accel:bitstream_id': 'd5ca2f11-3108-4426-a11c-a959987565df'},
    {'resources:CUSTOM_PCI_10DE_25B6': '2', 'trait:CUSTOM_SLOW': 'forbidden'}]}


def test_profile_groups_become_device_profile_groups():
    req = request.build(flavor(**{'accel:device_profile': 'dp1',
                                  'group_policy': 'isolate'}), PROFILE)
    g0, g1 = req.profile_groups()
    assert (g0.requester_id, g0.suffix, g0.mapping_key) == (
        'device_profile_0', '_DEVICE_PROFILE_0', '_DEVICE_PROFILE_0')
    assert g0.resources == {'FPGA': 1}
    assert g0.required == {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'}
    assert g1.requester_id == 'device_profile_1'
    assert g1.resources == {'CUSTOM_PCI_10DE_25B6': 2}
    assert (g1.required, g1.forbidden) == ({'OWNER_CYBORG'}, {'CUSTOM_SLOW'})
    assert req.device_profile == 'dp1'


def test_query_with_prefilter():
    req = request.build(flavor(**{'accel:device_profile': 'dp1',
                                  'group_policy': 'isolate'}), PROFILE)
    assert req.query(in_tree='R') == [
        ('resources', 'DISK_GB:1,MEMORY_MB:512,VCPU:2'),
        ('required', 'OWNER_NOVA,!OWNER_CYBORG'),
        ('resources_DEVICE_PROFILE_0', 'FPGA:1'),
        ('required_DEVICE_PROFILE_0', 'CUSTOM_FAKE_DEVICE,OWNER_CYBORG'),
        ('resources_DEVICE_PROFILE_1', 'CUSTOM_PCI_10DE_25B6:2'),
        ('required_DEVICE_PROFILE_1', 'OWNER_CYBORG,!CUSTOM_SLOW'),
        ('root_required', 'OWNER_NOVA'),
        ('group_policy', 'isolate'),
        ('in_tree', 'R')]


def test_query_without_prefilter_and_without_profile():
    req = request.build(flavor(), None, owner_nova_prefilter=False)
    assert req.query() == [('resources', 'DISK_GB:1,MEMORY_MB:512,VCPU:2')]
    assert req.profile_groups() == [] and req.device_profile is None


def test_flavor_extra_specs_override_and_add_nova_groups():
    req = request.build(flavor(**{
        'resources:DISK_GB': '0', 'resources:CUSTOM_MAGIC': '1',
        'trait:HW_CPU_X86_AVX2': 'required', 'trait:CUSTOM_BAD': 'forbidden',
        'resources1:SRIOV_NET_VF': '1', 'trait1:CUSTOM_PHYSNET_A': 'required',
        'hw:cpu_policy': 'dedicated', 'group_policy': 'none',
        'accel:device_profile': 'dp1'}), PROFILE)
    query = dict(req.query())
    assert query['resources'] == 'CUSTOM_MAGIC:1,MEMORY_MB:512,VCPU:2'
    assert query['required'] == 'HW_CPU_X86_AVX2,OWNER_NOVA,!CUSTOM_BAD,!OWNER_CYBORG'
    # Nova's numbered groups are one provider each: requiring OWNER_NOVA is enough.
    assert query['resources1'] == 'SRIOV_NET_VF:1'
    assert query['required1'] == 'CUSTOM_PHYSNET_A,OWNER_NOVA'
    assert query['group_policy'] == 'none'


def test_accel_keys_are_ignored():
    profile = {'name': 'dp', 'groups': [{'resources:FPGA': '1',
                                         'accel:function_id': 'x'}]}
    (group,) = request.build(flavor(**{'accel:device_profile': 'dp'}),
                             profile).profile_groups()
    assert group.query() == [('resources_DEVICE_PROFILE_0', 'FPGA:1'),
                             ('required_DEVICE_PROFILE_0', 'OWNER_CYBORG')]


def test_two_suffixed_groups_need_group_policy():
    with pytest.raises(exception.FlavorInvalid, match='group_policy'):
        request.build(flavor(**{'accel:device_profile': 'dp1'}), PROFILE)
    # One suffixed group alone does not.
    one = {'name': 'dp', 'groups': [PROFILE['groups'][0]]}
    assert request.build(flavor(), one).group_policy is None


@pytest.mark.parametrize('doc, match', [
    ([], 'JSON object'),
    ({'vcpus': 1, 'ram': 1}, 'name'),
    ({'name': 'f', 'vcpus': '1', 'ram': 1}, 'vcpus'),
    ({'name': 'f', 'vcpus': 0, 'ram': 1}, 'at least 1'),
    ({'name': 'f', 'vcpus': 1, 'ram': 1, 'disk': -1}, 'disk'),
    ({'name': 'f', 'vcpus': 1, 'ram': 1, 'extra_specs': {'a': 1}}, 'strings'),
    ({'name': 'f', 'vcpus': 1, 'ram': 1, 'extra_specs': {'group_policy': 'x'}},
     'group_policy'),
    ({'name': 'f', 'vcpus': 1, 'ram': 1,
      'extra_specs': {'accel:device_profile': ' '}}, 'empty'),
])
def test_bad_flavors(doc, match):
    with pytest.raises(exception.FlavorInvalid, match=match) as exc:
        request.parse_flavor(doc)
    assert exc.value.code == 'cyb.compute.flavor_invalid'


@pytest.mark.parametrize('specs, match', [
    ({'resources:VCPU': 'two'}, 'amount'),
    ({'trait:CUSTOM_X': 'preferred'}, 'required nor forbidden'),
    ({'resources_DEVICE_PROFILE_0:FPGA': '1'}, 'reserved'),
    ({'trait:OWNER_NOVA': 'forbidden'}, 'OWNER_NOVA'),
    ({'resources:lower': '1'}, 'resource class'),
])
def test_bad_flavor_extra_specs(specs, match):
    with pytest.raises(exception.FlavorInvalid, match=match):
        request.build(flavor(**specs))


@pytest.mark.parametrize('groups, match', [
    ([], 'no groups'),
    ([{'resources:FPGA': 'x'}], 'amount'),
    ([{'resources:FPGA': '1', 'trait:CUSTOM_X': 'maybe'}], 'required nor forbidden'),
    ([{'resources:FPGA': '1', 'bogus:key': '1'}], 'unknown key'),
])
def test_unusable_profiles(groups, match):
    with pytest.raises(exception.DeviceProfileUnusable, match=match):
        request.build(flavor(), {'name': 'dp', 'groups': groups})


def test_wrapped_flavor_and_defaults():
    f = request.parse_flavor({'flavor': {'name': 'x', 'vcpus': 1, 'ram': 64}})
    assert (f.disk, f.extra_specs, f.device_profile) == (0, {}, None)

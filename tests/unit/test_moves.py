"""steward.common.moves: the 2.7 move facts of each kind of handle and device."""
import pytest

from steward.common import moves


@pytest.mark.parametrize('attach_type,info,device_type,expected', [
    ('PCI', {'managed': False, 'live_migratable': True}, 'PCI',
     {'live_migratable': True, 'cold_migratable': True}),
    ('PCI', {'managed': True}, 'PCI',
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'PCI device not tagged live_migratable in [pci] device_spec'}),
    # Only a stored JSON true counts: the drivers store nothing else.
    ('PCI', {'live_migratable': 'true'}, 'PCI',
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'PCI device not tagged live_migratable in [pci] device_spec'}),
    ('MDEV', {'asked_type': 'mtty-2', 'live_migratable': True}, 'MDEV',
     {'live_migratable': True, 'cold_migratable': True}),
    ('MDEV', {'asked_type': 'nvidia-319'}, 'GPU',
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'nvidia_gpu device: the nvidia_gpu driver does not tag its '
                      'devices live_migratable'}),
    ('PCI', {}, 'GPU',
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'nvidia_gpu device: the nvidia_gpu driver does not tag its '
                      'devices live_migratable'}),
    # NVMe refuses even a (wrongly) stored tag: the data is never carried.
    ('PCI', {'live_migratable': True}, 'NVME',
     {'live_migratable': False, 'cold_migratable': False,
      'move_refusal': moves.NVME_REFUSAL}),
    ('TEST_PCI', {}, 'FPGA',
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'fake driver device (TEST_PCI): not live_migratable'}),
    ('PCI', {}, None,
     {'live_migratable': False, 'cold_migratable': True,
      'move_refusal': 'PCI device not tagged live_migratable in [pci] device_spec'}),
])
def test_facts(attach_type, info, device_type, expected):
    assert moves.facts(attach_type, info, device_type) == expected

"""The fake driver: one FPGA-typed device with 16 TEST_PCI functions, like upstream's
fake_driver, so a host without accelerators runs the whole flow."""
import re

from steward.drivers import base
from steward.drivers import objects

NUM_ACCELERATORS = 16


class FakeDriver(base.Driver):
    name = 'fake'

    def discover(self):
        cpid = objects.pci_info('0000', '0c', '00', '0')
        handles = [objects.DriverAttachHandle(
            attach_type='TEST_PCI',
            attach_info=objects.pci_info('0000', '0c', f'{fn:02x}', '0'))
            for fn in range(NUM_ACCELERATORS)]
        deployable = objects.DriverDeployable(
            name=re.sub(r'[^A-Za-z0-9_-]', '_', f'{self.host}_FakeDevice'),
            num_accelerators=NUM_ACCELERATORS,
            attribute_list=[objects.DriverAttribute('rc', 'FPGA'),
                            objects.DriverAttribute('trait0', 'CUSTOM_FAKE_DEVICE')],
            attach_handle_list=handles, driver_name='fake')
        return [objects.DriverDevice(
            vendor='0xABCD', model='miss model info', type='FPGA',
            controlpath_id=objects.DriverControlPathID('PCI', cpid),
            deployable_list=[deployable],
            std_board_info='{"device_id": "0xabcd", "class": "Fake class"}',
            vendor_board_info='fake_vendor_info', driver_name='fake')]

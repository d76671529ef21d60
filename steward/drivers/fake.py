"""The fake driver: one FPGA-typed device with 16 TEST_PCI functions, like upstream's
fake_driver, so a host without accelerators runs the whole flow. Its health is
what the file ``[health] fake_health_file`` says (issue 38)."""
import json
import logging
import re

from steward.common import health
from steward.conf import health as health_conf

from steward.drivers import base
from steward.drivers import objects

LOG = logging.getLogger(__name__)

NUM_ACCELERATORS = 16


class FakeDriver(base.Driver):
    name = 'fake'

    def __init__(self, conf, host):
        super().__init__(conf, host)
        health_conf.register_opts(conf)

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
            vendor_board_info='fake_vendor_info', driver_name='fake',
            health=self._health())]

    def _health(self):
        """What the operator told it: {"state": ..., "detail": ...} in the file."""
        path = self.conf.health.fake_health_file
        told = {}
        if path:
            try:
                with open(path) as f:
                    told = json.load(f)
            except FileNotFoundError:
                told = {}
            except (OSError, ValueError) as err:
                LOG.error('fake: [health] fake_health_file %s unreadable: %s', path, err)
                return None
        state = told.get('state', health.HEALTH_OK) if isinstance(told, dict) else None
        if state not in health.HEALTH_STATES:
            LOG.error('fake: [health] fake_health_file %s: state %r is not one of %s',
                      path, state, ', '.join(health.HEALTH_STATES))
            return None
        if state == health.HEALTH_OK:
            return health.read_now([]).to_dict()
        return health.read_now([health.Condition(
            'fake.told', state, str(told.get('detail') or 'told so'))]).to_dict()

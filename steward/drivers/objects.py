"""What a driver reports: the agent -> conductor payload (upstream's Driver* objects).

Plain dataclasses with a dict form for RPC. ``version`` lets a newer conductor read
an older agent's payload: fields added later have defaults.
"""
import dataclasses
import json

PAYLOAD_VERSION = '1.0'

#: The attribute naming the pool a deployable belongs to (issue 52): deployables
#: of one host with the same value are one resource provider, named by it.
POOL_KEY = 'pool'


@dataclasses.dataclass
class DriverAttachHandle:
    attach_type: str
    attach_info: str            # JSON text; the identity of the handle in the diff
    in_use: bool = False


@dataclasses.dataclass
class DriverAttribute:
    key: str                    # 'rc', or 'trait<N>' for each trait
    value: str


@dataclasses.dataclass
class DriverDeployable:
    name: str
    num_accelerators: int
    attribute_list: list = dataclasses.field(default_factory=list)
    attach_handle_list: list = dataclasses.field(default_factory=list)
    driver_name: str = ''

    @property
    def resource_class(self):
        return next((a.value for a in self.attribute_list if a.key == 'rc'), None)

    @property
    def traits(self):
        return frozenset(a.value for a in self.attribute_list if a.key.startswith('trait'))

    @property
    def pool(self):
        return next((a.value for a in self.attribute_list if a.key == POOL_KEY), None)


@dataclasses.dataclass
class DriverControlPathID:
    cpid_type: str
    cpid_info: str              # JSON text: the device's identity on its host


@dataclasses.dataclass
class DriverDevice:
    vendor: str
    model: str
    type: str
    controlpath_id: DriverControlPathID
    deployable_list: list = dataclasses.field(default_factory=list)
    std_board_info: str = '{}'
    vendor_board_info: str = '{}'
    stub: bool = False
    driver_name: str = ''
    # steward.common.health.Reading.to_dict() of what the driver read of the
    # device's health; None: it reads none (a conductor then keeps what it had).
    health: dict | None = None

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d['controlpath_id'] = DriverControlPathID(**d['controlpath_id'])
        deps = []
        for dep in d.get('deployable_list', []):
            dep = dict(dep)
            dep['attribute_list'] = [DriverAttribute(**a) for a in dep.get('attribute_list', [])]
            dep['attach_handle_list'] = [DriverAttachHandle(**h)
                                         for h in dep.get('attach_handle_list', [])]
            deps.append(DriverDeployable(**dep))
        d['deployable_list'] = deps
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def pci_info(domain, bus, device, function):
    """The canonical cpid/attach_info JSON for a PCI address (hex, no 0x)."""
    return json.dumps({'domain': domain, 'bus': bus, 'device': device,
                       'function': function}, sort_keys=True)

"""How a Bound ARQ's device may move with its instance (API 2.7, issue 32).

Nova asks before a resize, cold or live migration: a cold move releases the
source's device and binds a fresh one at the destination (device state is never
carried); a live move carries the device's state only through a VFIO variant
driver's migration support, which the operator vouches for with the
``live_migratable`` tag of the device's ``[pci]`` or ``[mdev] device_spec`` entry.

* NVMe (device type ``NVME``): neither. The namespace holds the tenant's data,
  which a move does not carry, and the source goes through cleaning once released
  (spec 1): refusing is the only way not to drop the data silently.
* PCI (pci driver, nvidia_gpu pGPUs), ``TEST_PCI`` (fake driver) and any other
  handle type: cold always; live when the stored attach_info says
  ``live_migratable: true``.
* ``MDEV`` (mdev driver, nvidia_gpu vGPUs): the same, from ``[mdev] device_spec``.

The tag is stored in the handle's attach_info by the driver at discovery (only
when true): a handle discovered before the tag existed, or whose entry does not
set it, has none and means false, as an absent tag does in Nova.
"""

LIVE_KEY = 'live_migratable'

NVME_REFUSAL = ("NVMe device: the namespace holds the tenant's data, which a move "
                "does not carry")
_NOT_TAGGED = {
    'PCI': 'PCI device not tagged live_migratable in [pci] device_spec',
    'MDEV': 'mdev device not tagged live_migratable in [mdev] device_spec',
    'TEST_PCI': 'fake driver device (TEST_PCI): not live_migratable',
}
# Devices whose driver has no device_spec tag: the pci driver's wording would send
# the operator to a section that does not apply.
_NOT_TAGGABLE = {
    'GPU': 'nvidia_gpu device: the nvidia_gpu driver does not tag its devices '
           'live_migratable',
}


def live_tag(attach_info):
    """The stored tag: true only when the driver wrote ``live_migratable: true``."""
    return (attach_info or {}).get(LIVE_KEY) is True


def facts(attach_type, attach_info, device_type):
    """``{live_migratable, cold_migratable[, move_refusal]}`` of one Bound handle.

    ``attach_info``: the handle's stored attach_info (a dict); ``device_type``:
    the type of the device the handle belongs to (``NVME``, ``GPU``, ...), or None
    when it is unknown.
    """
    if device_type == 'NVME':
        return {'live_migratable': False, 'cold_migratable': False,
                'move_refusal': NVME_REFUSAL}
    out = {'live_migratable': live_tag(attach_info), 'cold_migratable': True}
    if not out['live_migratable']:
        out['move_refusal'] = _NOT_TAGGABLE.get(device_type) or _NOT_TAGGED.get(
            attach_type, f'{attach_type} device: not tagged live_migratable')
    return out

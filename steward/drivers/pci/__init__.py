"""PCI functions: the generic PCI driver (``pci``, driver.py), Nova-style
``device_spec`` entries and their matching (device_spec.py) and PCI sysfs
(sysfs.py). The NVMe and mdev drivers and the compute side build on the last two."""

"""The NVMe driver (``nvme``, spec 1): the driver (driver.py), what the controller
offers (caps.py, read through nvme-cli: cli.py), the cleanup policy chosen at
discovery (policy.py), the cleanup that runs it (cleanup.py) and the controller's
namespaces in sysfs (sysfs.py)."""

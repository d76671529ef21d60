"""Mediated devices: the generic mdev driver (``mdev``, driver.py) and the reading
of ``/sys/class/mdev_bus`` (bus.py) that every driver offering mdevs shares."""

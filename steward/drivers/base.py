"""The one base class every driver derives from."""
import abc


class Driver(abc.ABC):
    """A device driver run by the agent.

    ``init_host()`` runs once at agent start (check tools, recover interrupted work);
    ``discover()`` runs every discovery cycle and returns DriverDevice objects;
    ``cleanup(device)`` makes a released device safe for the next tenant. The
    conductor only asks drivers whose devices support cleaning.
    """

    #: Name used in [agent] enabled_drivers and in deployables' driver_name.
    name = None
    #: mdev-capable drivers may both see one parent device: the first listed in
    #: enabled_drivers keeps it and the agent only warns (spec 2). For every other
    #: driver a device claimed twice is a configuration error.
    shares_parents = False

    def __init__(self, conf, host):
        self.conf = conf
        self.host = host

    def init_host(self, context=None):
        """Called once before the first discovery."""

    @abc.abstractmethod
    def discover(self):
        """Return a list of DriverDevice."""

    def cleanup(self, device, job=None):
        """Clean ``device`` (a dict of its stored fields). ``job`` reports phase and
        progress and carries the erase record (steward/drivers/cleanup_job.py).
        Default: nothing to do."""

"""What a conductor asks Nova of a server (GET /servers/{uuid}): the orphan
check of its periodic tasks (steward/conductor/periodic.py) takes the ARQs of
an instance Nova no longer has, or no longer has on their host, for left over.
It talks to Nova through the same ``[nova]`` adapter as the events the ARQ
operations send (steward/arqs/nova_events.py); it runs in a conductor only.
"""
import dataclasses

from keystoneauth1 import exceptions as ks_exc

from steward.arqs import nova_events
from steward.conf import CONF


class ServerStatusUnknown(Exception):
    """Nova did not say whether a server exists (an error status, no answer)."""

    def __init__(self, reason, unreachable=False):
        super().__init__(reason)
        self.unreachable = unreachable


# Server statuses of an instance in the middle of a move (resize, cold or live
# migration, before its confirm or revert): both hosts' ARQs are still needed.
MOVING_STATUSES = frozenset(('RESIZE', 'VERIFY_RESIZE', 'REVERT_RESIZE', 'MIGRATING'))


@dataclasses.dataclass(frozen=True)
class Server:
    """What the orphan check needs of a Nova server."""
    host: str | None            # OS-EXT-SRV-ATTR:host (admin only)
    status: str | None
    task_state: str | None      # OS-EXT-STS:task_state

    @property
    def moving(self):
        """A move is under way or awaits its confirm or revert: no set of its ARQs
        may be taken for left over."""
        return self.status in MOVING_STATUSES or self.task_state is not None


class ServerLookup:
    """``GET /servers/{uuid}``: does Nova still have this server, on which host,
    and is it moving? The conductor's orphan check (steward/conductor/periodic.py).
    The ``[nova]`` credentials must see every project's servers and their host
    (admin, as Nova's external events API requires): a 404 is taken to mean the
    server is gone."""

    def __init__(self, conf=CONF, adapter=None, announce=True):
        """``announce=False``: no start-up line (another notifier of the same
        service, an API worker of steward serve, said it already)."""
        self.conf = conf
        self._adapter = adapter

    def server(self, instance_uuid):
        """A Server (200), None (404); raises ServerStatusUnknown otherwise."""
        if self._adapter is None:
            self._adapter = nova_events.build_adapter(self.conf)
        try:
            resp = self._adapter.get(f'/servers/{instance_uuid}', raise_exc=False,
                                     microversion=nova_events.MICROVERSION,
                                     timeout=self.conf.nova.event_timeout)
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout) as err:
            raise ServerStatusUnknown(type(err).__name__, unreachable=True)
        except ks_exc.ClientException as err:
            raise ServerStatusUnknown(
                f'{type(err).__name__}: {str(err).splitlines()[0][:200]}')
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ServerStatusUnknown(f'HTTP {resp.status_code}')
        try:
            body = resp.json()['server']
        except (ValueError, KeyError, TypeError):
            raise ServerStatusUnknown('HTTP 200 without a server body')
        if not isinstance(body, dict):
            raise ServerStatusUnknown('HTTP 200 without a server body')
        return Server(host=body.get('OS-EXT-SRV-ATTR:host'), status=body.get('status'),
                      task_state=body.get('OS-EXT-STS:task_state'))

    def exists(self, instance_uuid):
        """True (200), False (404); raises ServerStatusUnknown otherwise."""
        return self.server(instance_uuid) is not None

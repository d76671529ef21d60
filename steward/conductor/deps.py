"""What the conductor's operations work with, in one object: built by the
composition root (steward/cmd/root.py; tests' fixtures play that part) and handed
to every operation as its first parameter, ``deps``. The ARQ operations
(steward/arqs) take the same object, wherever they run: an API process's has no
agent API and no server lookup. No module of steward/conductor or steward/arqs
builds or keeps any of these itself: two conductors in one process, as tests run
them, stay apart, and a missing one is a TypeError when ``Deps`` is built, never
a silent client of its own.
"""
import dataclasses

from steward.common import exception


@dataclasses.dataclass(frozen=True)
class Deps:
    """Every field is required (None where the field says it may be)."""
    database: object
    """The steward.db.session.Database of this conductor."""
    metrics: object
    """The process's steward.metrics.Metrics (bind, cleanup, self-healing and
    orphan counters; the Placement client's statistics are registered there)."""
    placement_client: object
    """A steward.placement.client.PlacementClient, or None when this conductor
    has no Placement (API-only tests): ``placement()`` then refuses with 503."""
    nova: object
    """The steward.conductor.nova_servers.ServerLookup the orphan check asks
    Nova's ``GET /servers/{uuid}`` with (used only with [nova] configured; None
    in an API process)."""
    notifier: object
    """The steward.arqs.nova_events.NovaNotifier that sends Nova's
    accelerator-request-bound events."""
    agent_api: object
    """The steward.agent.rpcapi.AgentAPI that calls the agents and learns each
    host's agent version (None in an API process)."""

    def placement(self):
        """The Placement client; ServiceUnavailable when there is none."""
        if self.placement_client is None:
            raise exception.ServiceUnavailable(service='Placement',
                                               reason='no Placement client configured')
        return self.placement_client

"""What the conductor's operations talk to (the database included), owned by one
ConductorManager and handed to every operation that needs it (no module holds a
client of its own: two conductors in one process, as tests run them, stay apart).
"""
import dataclasses

from steward.common import exception


@dataclasses.dataclass(frozen=True)
class Clients:
    """``database``: the steward.db.session.Database of this conductor;
    ``metrics``: the process's steward.metrics.Metrics;
    ``placement_client``: a PlacementClient, or None when this conductor has no
    Placement (API-only tests); ``agent_api``: the AgentAPI that learns each host's
    agent version."""
    database: object
    metrics: object
    placement_client: object
    agent_api: object

    def placement(self):
        if self.placement_client is None:
            raise exception.ServiceUnavailable(service='Placement',
                                               reason='no Placement client configured')
        return self.placement_client

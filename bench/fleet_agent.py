"""A simulated compute host for bench/fleet.py: what a real agent sends, without
the agent around it.

Ten thousand real ``AgentManager`` objects in one benchmark process cost a
discovery (the fake driver's objects built and turned into dicts) per report,
on the same two cores the conductor is measured on. A ``SimAgent`` runs its
driver's discovery once and then sends that report each cycle through the same
``ConductorAPI`` a real agent uses, through the real agent's
``ReportSender`` (steward/agent/reporting.py): the same calls (``report_data``,
and ``report_unchanged`` with the digest once a conductor acknowledged the
report), the same arguments and the same kind of context (a fresh admin context
with its own request id). tests/unit/test_fleet_agent.py compares the messages
as the conductor receives them.
"""
from steward.agent import reporting
from steward.common import context


class SimAgent:
    """One host: ``conductor_api`` a steward.conductor.rpcapi.ConductorAPI,
    ``drivers`` the drivers a real agent of this host would run."""

    def __init__(self, conductor_api, host, drivers, rp_name=None):
        self.conductor = conductor_api
        self.host = host
        # As AgentManager: [agent] resource_provider_name or the host.
        self.rp_name = rp_name or host
        devices = []
        for driver in drivers:
            for dev in driver.discover():
                dev.driver_name = dev.driver_name or driver.name
                devices.append(dev.to_dict())
        self.devices = devices
        self.reports = reporting.ReportSender(conductor_api, host, self.rp_name)

    def run_cycle(self):
        """One report, as AgentManager.run_cycle sends it; the conductor's answer."""
        ctx = context.get_admin_context()
        ctx.update_store()
        return self.reports.send(ctx, self.devices)

"""Simulated NVMe controllers below the real nvme-cli (see README.md).

    from tests.nvme_sim import Simulation
    sim = Simulation(tmp_path)
    ctrl = sim.add_controller(address='0000:0a:00.0', namespaces=[64 * 2**20])
    subprocess.run([sim.nvme_cli, 'id-ctrl', ctrl.char_path, '-o', 'json'],
                   env=sim.environ())
"""
from tests.nvme_sim.build import BuildError
from tests.nvme_sim.controller import Controller, SimError, Simulation

__all__ = ['BuildError', 'Controller', 'SimError', 'Simulation']

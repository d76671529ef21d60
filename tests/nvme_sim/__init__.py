"""Simulated NVMe controllers below the real nvme-cli (see README.md).

    from tests.nvme_sim import Simulation
    sim = Simulation(tmp_path)
    ctrl = sim.add_controller(address='0000:0a:00.0', namespaces=[64 * 2**20])
    subprocess.run([sim.nvme_cli, 'id-ctrl', ctrl.char_path, '-o', 'json'],
                   env=sim.environ())
"""
from tests.nvme_sim.build import BuildError
from tests.nvme_sim.controller import Controller, SimError, Simulation

__all__ = ['BuildError', 'Controller', 'SimError', 'Simulation', 'simulation_for_test']


def simulation_for_test(path):
    """A Simulation under ``path``, or the test skipped (failed where nvme is
    required: tests/fixtures/requirements.py) when nvme-cli or the simulator's build is
    missing."""
    import shutil
    from tests.fixtures import requirements
    if not shutil.which('nvme'):
        requirements.need('nvme', 'nvme-cli is not installed')
    try:
        return Simulation(path)
    except BuildError as err:
        requirements.need('nvme', f'the NVMe simulator cannot be built: {err}')

"""tests/fixtures/stack.py's free_port(): a port handed to one process of a test
run is never handed to another of its processes (xdist workers, their
subprocesses), even before anything binds it."""
import os
import subprocess
import sys

from tests.fixtures import stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _claim_in_child(port, shared):
    env = dict(os.environ, **{stack.PORTS_ENV: str(shared)})
    out = subprocess.run(
        [sys.executable, '-c', 'import sys; from tests.fixtures import stack; '
         f'print(stack.bindable({port}) and stack.claim({port}))'],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_port_handed_out_is_refused_to_the_runs_other_processes(tmp_path, monkeypatch):
    monkeypatch.setenv(stack.PORTS_ENV, str(tmp_path))
    port = stack.free_port()
    assert (tmp_path / str(port)).exists()
    # Nothing is bound to it yet: only the claim keeps it from another process.
    assert stack.bindable(port)
    assert _claim_in_child(port, tmp_path) == 'False'
    # A port nobody claimed is the other process's to take.
    other = next(p for p in range(*stack._below_ephemeral())
                 if stack.bindable(p) and not (tmp_path / str(p)).exists())
    assert _claim_in_child(other, tmp_path) == 'True'
    assert (tmp_path / str(other)).exists()
    # And then no longer this one's.
    assert not stack.claim(other)


def test_the_test_run_shares_one_claim_directory():
    shared = os.environ.get(stack.PORTS_ENV)
    assert shared and os.path.isdir(shared)

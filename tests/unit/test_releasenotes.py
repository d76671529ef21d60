"""Release notes as reno reads them: `reno lint` passes and every note has reno's
name (releasenotes/notes/<slug>-<16 hex>.yaml) and known sections."""
import os
import pathlib
import re
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTES = ROOT / 'releasenotes' / 'notes'


def test_reno_lint_passes():
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'reno'), 'lint'],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_note_is_named_and_sectioned_as_reno_expects():
    config = yaml.safe_load((ROOT / 'releasenotes' / 'config.yaml').read_text())
    sections = {name for name, _ in config['sections']} | {'prelude'}
    notes = sorted(NOTES.iterdir())
    assert notes
    for path in notes:
        assert re.fullmatch(r'[a-z0-9][a-z0-9-]*-[0-9a-f]{16}\.yaml', path.name), path.name
        body = yaml.safe_load(path.read_text())
        assert body and set(body) <= sections, (path.name, set(body) - sections)

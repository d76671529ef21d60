"""The lint configuration (pyproject.toml [tool.ruff], run by tools/lint.sh from
.ci/run and `tox -e pep8`) catches what it is there for: the real ruff, on a
file with one finding of each kind."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUFF = os.path.join(os.path.dirname(sys.executable), 'ruff')

FINDINGS = {
    'F401': 'import os\n',
    'F821': 'print(undefined_name)\n',
    'BLE001': 'try:\n    pass\nexcept Exception:\n    pass\n',
    'B006': 'def f(x=[]):\n    return x\n',
    'E501': f'X = "{"x" * 130}"\n',
    'W291': 'Y = 1 \n',
}


def _ruff(path):
    return subprocess.run([RUFF, 'check', '--no-cache', '--output-format', 'concise',
                           '--config', str(ROOT / 'pyproject.toml'), str(path)],
                          capture_output=True, text=True, cwd=ROOT)


def test_each_kind_of_finding_fails_the_lint(tmp_path):
    path = tmp_path / 'bad.py'
    path.write_text(''.join(FINDINGS.values()))
    out = _ruff(path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert {code for code in FINDINGS if f' {code} ' in out.stdout} == set(FINDINGS)


def test_a_noqa_marker_with_its_reason_passes(tmp_path):
    path = tmp_path / 'good.py'
    path.write_text('try:\n    pass\nexcept Exception:  # noqa: BLE001 - why\n    pass\n')
    out = _ruff(path)
    assert out.returncode == 0, out.stdout + out.stderr

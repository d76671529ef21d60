"""tests/fixtures/requirements.py: one way to skip for a missing dependency, and the
STEWARD_REQUIRE switch that turns those skips into failures."""
import os
import pathlib
import re

import pytest

from tests.fixtures import requirements

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_missing_dependency_skips_by_default(monkeypatch):
    monkeypatch.delenv(requirements.ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r'\[postgres\] no server'):
        requirements.need('postgres', 'no server')
    requirements.degraded('netns', 'loopback only')          # carries on


@pytest.mark.parametrize('value', ['postgres', 'rabbitmq, postgres', 'all'])
def test_required_dependency_fails_instead(monkeypatch, value):
    monkeypatch.setenv(requirements.ENV, value)
    with pytest.raises(pytest.fail.Exception, match='STEWARD_REQUIRE requires postgres'):
        requirements.need('postgres', 'no server')
    with pytest.raises(pytest.fail.Exception, match='STEWARD_REQUIRE requires postgres'):
        requirements.degraded('postgres', 'no server')


def test_other_dependency_still_skips(monkeypatch):
    monkeypatch.setenv(requirements.ENV, 'rabbitmq')
    with pytest.raises(pytest.skip.Exception):
        requirements.need('postgres', 'no server')


def test_need_import(monkeypatch):
    monkeypatch.setenv(requirements.ENV, 'libvirt')
    assert requirements.need_import('json', 'libvirt', 'x').dumps(1) == '1'
    with pytest.raises(pytest.fail.Exception, match=r'\[libvirt\] no such'):
        requirements.need_import('steward_no_such_module', 'libvirt', 'no such')


def test_unknown_names_are_errors(monkeypatch):
    monkeypatch.setenv(requirements.ENV, 'postgres,postgress')
    with pytest.raises(pytest.UsageError, match='postgress'):
        requirements.required()
    with pytest.raises(ValueError, match='gpu'):
        requirements.need('gpu', 'no GPU')


def _test_sources():
    for path in sorted((ROOT / 'tests').rglob('*.py')):
        if path.name != 'requirements.py' and path != pathlib.Path(__file__).resolve():
            yield path, path.read_text()


def test_no_test_skips_or_xfails_around_the_helper():
    """Every dependency skip goes through requirements.need(); nothing asks the code
    whether a feature exists and skips or xfails when it does not."""
    pattern = re.compile(r'pytest\.(skip|xfail|importorskip)\b|mark\.(skip|skipif|xfail)\b'
                         r'|unittest\.skip')
    found = [f'{p.relative_to(ROOT)}:{n}: {line.strip()}'
             for p, text in _test_sources()
             for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_every_need_names_a_known_dependency():
    used = set()
    for _path, text in _test_sources():
        used |= set(re.findall(r"requirements\.(?:need|degraded)\(\s*'(\w+)'", text))
        used |= set(re.findall(r"requirements\.need_import\(\s*'[\w.]+',\s*'(\w+)'", text))
    assert used and used <= set(requirements.DEPENDENCIES)


def test_ci_requires_every_dependency_and_runs_the_readme_command():
    script = (ROOT / '.ci' / 'run').read_text()
    match = re.search(r'^STEWARD_REQUIRE=(\S+) exec bash tools/test\.sh$', script, re.M)
    assert match, script
    assert set(match.group(1).split(',')) == set(requirements.DEPENDENCIES)
    assert './tools/test.sh' in (ROOT / 'README.md').read_text()
    assert os.access(ROOT / '.ci' / 'run', os.X_OK) or script.startswith('#!')

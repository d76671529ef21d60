"""doc/contributor/ shows the code as it is: each excerpt marked
``<!-- from: PATH -->`` on the line before its fenced block is found in PATH line
for line (modulo common indentation), and every repository path and page the
pages name exists. An excerpt that no longer matches its file fails here, so a
change to the code shows which page to update."""
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONTRIBUTOR = ROOT / 'doc' / 'contributor'
PAGES = ('architecture.md', 'drivers.md', 'microversions.md', 'states.md',
         'schema-changes.md')

EXCERPT = re.compile(r'^<!-- from: (\S+) -->\n```[a-z]*\n(.*?)^```', re.M | re.S)
FENCED = re.compile(r'^```.*?^```', re.M | re.S)
# A repository path in backticks: under one of the tree's top directories, or a
# file at its root.
NAMED_PATH = re.compile(r'`((?:steward|tests|tools|doc|etc|releasenotes|bench|contrib)'
                        r'/[\w./-]*|pyproject\.toml|README\.md|bindep\.txt)`')
LINK = re.compile(r'\]\(([^)#\s]+\.md)(?:#[^)]*)?\)')


def _lines(text):
    return textwrap.dedent(text).splitlines()


def is_excerpt_of(block, source):
    """Whether ``block``'s lines are consecutive lines of ``source``, each window
    compared after removing its own common indentation."""
    want = _lines(block)
    if not want:
        return False
    have = source.splitlines()
    first = want[0].strip()
    for i in range(len(have) - len(want) + 1):
        if have[i].strip() == first and _lines('\n'.join(have[i:i + len(want)])) == want:
            return True
    return False


def problems(page, text, root=ROOT):
    """What does not hold in one page: excerpts not in their file, paths and
    linked pages that do not exist."""
    found = []
    for path, block in EXCERPT.findall(text):
        source = root / path
        if not source.is_file():
            found.append(f'{page}: excerpt from {path}, which does not exist')
        elif not is_excerpt_of(block, source.read_text()):
            found.append(f'{page}: excerpt not found as it is in {path}:\n{block}')
    prose = FENCED.sub('', text)
    for path in sorted(set(NAMED_PATH.findall(prose))):
        if not (root / path).exists():
            found.append(f'{page}: names {path}, which does not exist')
    for link in sorted(set(LINK.findall(prose))):
        if not (CONTRIBUTOR / link).resolve().is_file():
            found.append(f'{page}: links {link}, which does not exist')
    return found


@pytest.mark.parametrize('page', PAGES)
def test_contributor_page_quotes_the_code_as_it_is(page):
    text = (CONTRIBUTOR / page).read_text()
    assert EXCERPT.search(text), f'{page} quotes no code'
    assert problems(page, text) == []


def test_every_contributor_page_is_checked_and_linked():
    assert sorted(p.name for p in CONTRIBUTOR.glob('*.md')) == sorted(PAGES)
    index = (ROOT / 'doc' / 'index.md').read_text()
    readme = (ROOT / 'README.md').read_text()
    for page in PAGES:
        assert f'contributor/{page}' in index, page
    assert 'doc/contributor/architecture.md' in readme


def test_a_changed_excerpt_a_missing_path_and_a_dead_link_are_found():
    real = (CONTRIBUTOR / 'microversions.md').read_text()
    (path, block), *_ = EXCERPT.findall(real)
    assert is_excerpt_of(block, (ROOT / path).read_text())
    # One character changed, a line dropped from the middle, another indentation
    # inside the block: none of them is the code as it is.
    assert not is_excerpt_of(block.replace("'2.7'", "'2.8'"), (ROOT / path).read_text())
    lines = block.splitlines()
    assert not is_excerpt_of('\n'.join(lines[:1] + lines[2:]), (ROOT / path).read_text())
    assert not is_excerpt_of(lines[0] + '\n    ' + lines[1], (ROOT / path).read_text())
    changed = real.replace("ARQ_MOVE = _add('2.7'", "ARQ_MOVE = _add('2.8'", 1)
    changed += '\nSee `steward/api/nowhere.py` and [a page](nowhere.md).\n'
    found = problems('microversions.md', changed)
    assert len(found) == 3, found
    assert 'excerpt not found as it is in steward/api/microversion.py' in found[0]
    assert 'steward/api/nowhere.py' in found[1] and 'nowhere.md' in found[2]

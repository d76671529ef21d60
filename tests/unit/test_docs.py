"""Generated documents match the code they describe."""
import os

import pytest

from tools import docs


@pytest.mark.parametrize('path', sorted(docs.GENERATED))
def test_generated_document_is_current(path):
    with open(os.path.join(docs.ROOT, path)) as f:
        assert f.read() == docs.GENERATED[path](), f'run: python tools/docs.py ({path})'


def test_every_state_is_documented():
    text = docs.states_markdown()
    for line in text.splitlines():
        if line.startswith('* **'):
            assert line.split('**: ', 1)[1].strip(), line

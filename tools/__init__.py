"""Development tools, not installed with Steward: the shell scripts and docs.py.
A package so that tests/unit/test_docs.py imports docs.py ahead of any other
``tools`` on the path."""

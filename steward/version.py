"""Steward's version: the installed distribution's, which setuptools-scm derives
from git at install time (``git describe``; 0.1.0.devN+g<commit> on a clone
without tags)."""
from importlib import metadata


def version_string():
    try:
        return metadata.version('steward')
    except metadata.PackageNotFoundError:     # a source tree on sys.path, not installed
        return 'unknown (not installed)'

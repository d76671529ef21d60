"""What a test needs from the machine, and the switch that stops CI passing by skipping.

Every test that cannot run without something outside the Python environment (a
server binary, a Debian package, a kernel feature) says so through ``need()``;
nothing in tests/ calls ``pytest.skip`` for a missing dependency directly
(tests/unit/test_requirements.py checks). Without ``STEWARD_REQUIRE`` a missing
dependency skips, so a developer's laptop runs what it can. With
``STEWARD_REQUIRE=postgres,rabbitmq,...`` (``.ci/run`` sets it) a missing
dependency named there fails the test instead: CI cannot go green by skipping.
``STEWARD_REQUIRE=all`` names every dependency below.
"""
import importlib
import os

import pytest

DEPENDENCIES = {
    'postgres': 'a PostgreSQL server (Debian postgresql): tests start a cluster of '
                'their own',
    'rabbitmq': 'rabbitmq-server: the multi-host deployment and steward agent alone',
    'libvirt': "libvirt's schemas, virsh, virt-xml-validate, xmllint and "
               'libvirt-python (Debian libvirt-clients, libxml2-utils, libvirt-dev and '
               'pkg-config to build libvirt-python)',
    'nvme': 'nvme-cli and what the NVMe simulator needs (gcc, libnvme-dev, mknod)',
    'netns': 'root with `ip netns`: multi-host agents each in a network namespace',
    'pci': 'at least one real PCI function under /sys/bus/pci/devices',
    'root': 'uid 0: privsep daemons started with ambient capabilities, and a '
            'service that drops to another user',
    'nova': 'a side venv .venv-nova with nova==34.0.0 and its unit-test packages, '
            'built by tools/nova-series.sh (pip: the package index or its cache)',
    'cyborg': 'upstream OpenStack Cyborg 17.0.0 in .venv-cyborg (built on first use '
              'by tests/cyborg_upstream.py: pip install from the package index)',
    'mariadb': 'a MariaDB server (Debian mariadb-server): tests start one of their own '
               '(tests/mariadb_fixture.py), as the database of an upstream Cyborg',
    'pypi': 'the package index (network): side venvs of upstream software the '
            'tests run (tests/side_venv.py: Keystone 30 + uWSGI, tempest 47 + '
            'cyborg-tempest-plugin 2.8, openstack-cyborg 17.0.0)',
}

ENV = 'STEWARD_REQUIRE'


def required():
    """The dependencies named in STEWARD_REQUIRE; an unknown name is an error (a
    typo must not turn the switch off)."""
    names = {n.strip() for n in os.environ.get(ENV, '').split(',') if n.strip()}
    if 'all' in names:
        return set(DEPENDENCIES)
    unknown = names - set(DEPENDENCIES)
    if unknown:
        raise pytest.UsageError(f'{ENV} names unknown dependencies {sorted(unknown)}; '
                                f'known: {sorted(DEPENDENCIES)} or all')
    return names


def _check(dependency):
    if dependency not in DEPENDENCIES:
        raise ValueError(f'unknown dependency {dependency!r}; add it to '
                         f'tests/requirements.py DEPENDENCIES')


def need(dependency, reason):
    """The test cannot run: skip, or fail when ``dependency`` is required."""
    _check(dependency)
    message = f'[{dependency}] {reason}'
    if dependency in required():
        pytest.fail(f'{message} ({ENV} requires {dependency})', pytrace=False)
    pytest.skip(message)


def degraded(dependency, reason):
    """The test runs without ``dependency``, but tests less (e.g. loopback instead
    of network namespaces): fail when it is required, otherwise carry on."""
    _check(dependency)
    if dependency in required():
        pytest.fail(f'[{dependency}] {reason} ({ENV} requires {dependency})',
                    pytrace=False)


def need_import(module, dependency, reason):
    """``pytest.importorskip`` through ``need()``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        need(dependency, reason)

"""The OSC plugin module (osc-lib conventions): ``API_NAME``,
``API_VERSION_OPTION``, ``API_VERSIONS``, ``DEFAULT_API_VERSION``,
``make_client``, ``build_option_parser``, ``check_api_version``.

``--os-steward-api-version`` / ``OS_STEWARD_API_VERSION`` is the accelerator
microversion Steward's commands use (clouds.yaml: ``steward_api_version``, ``2``
or ``2.N``). ``2`` (the default; ``latest`` means the same on the command line
and in the environment) asks the server for the newest it offers, up to
``MAX_VERSION``; ``2.N`` uses exactly that one. It does
not change what ``--os-accelerator-api-version`` means for the built-in
``openstack accelerator`` commands. OSC derives the command group from the
major version: ``openstack.steward.v2``.
"""
import argparse
import re

from osc_lib import exceptions
from osc_lib import utils

from steward.osc import client

API_NAME = 'steward'
API_VERSION_OPTION = 'os_steward_api_version'
DEFAULT_API_VERSION = '2'
MAX_VERSION = client.MAX_VERSION
API_VERSIONS = ('2', '2.0', '2.1', '2.2', '2.3', '2.4', '2.5', '2.6', '2.7', '2.8')
_VERSION = re.compile(r'^2(\.\d+)?$')


def version_arg(text):
    """``latest`` -> ``2``; otherwise ``2`` or ``2.N``."""
    text = (text or '').strip()
    if text.lower() == 'latest':
        return DEFAULT_API_VERSION
    if not _VERSION.match(text):
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a Steward API version (2, 2.N or latest)')
    return text


def check_api_version(check_version):
    """Called by OSC with the requested version; True skips its own check
    against API_VERSIONS (any 2.N is passed on: the server decides)."""
    if not _VERSION.match(str(check_version)):
        raise exceptions.CommandError(
            f'--os-steward-api-version {check_version!r}: use 2, 2.N or latest')
    return True


def make_client(instance):
    """The Steward client: the accelerator endpoint of OSC's SDK connection
    (clouds.yaml, OS_* variables, --os-endpoint, the catalog) plus
    microversion negotiation."""
    requested = instance._api_version.get(API_NAME, DEFAULT_API_VERSION)
    return client.Client(instance.sdk_connection.accelerator, requested)


def build_option_parser(parser):
    parser.add_argument(
        '--os-steward-api-version',
        metavar='<steward-api-version>',
        type=version_arg,
        # No default here: an option default would hide clouds.yaml's
        # steward_api_version; OSC falls back to DEFAULT_API_VERSION.
        default=utils.env('OS_STEWARD_API_VERSION') or None,
        help=f'Accelerator microversion for the Steward commands (accelerator device '
             f'clean, erase record list, history list, and the device_state/'
             f'last_error/missing columns of device list/show): 2 or latest = the '
             f'newest the server offers up to {MAX_VERSION} (default), or 2.N '
             f'(Env: OS_STEWARD_API_VERSION)')
    return parser

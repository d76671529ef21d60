"""What the OpenStackClient plugin's commands (steward/osc: ``openstack accelerator
device clean|erase record list|history list``) share: the exit codes and errors
(``errors``), UUID arguments, and waiting with progress (``progress``).

Exit codes of the plugin's commands (doc/cli.md; scripts rely on them):

====  =====================================================================
0     success (also when the reader of stdout went away: ``... | head -n 1``)
1     the API refused or failed the request (an HTTP error not listed below),
      an operation waited for (``--wait``) ended in a failure state, or the
      CLI itself failed unexpectedly
2     bad usage, found before anything was changed: unknown option,
      malformed argument, unknown ``-c`` column, an API version the server
      does not offer, incomplete authentication options
3     not found: the API answered 404, or no object has the given name
4     not allowed: authentication failed (401) or policy refused (403)
5     no connection: the API or Keystone cannot be reached, or the service
      catalog has no accelerator endpoint
6     ``--wait-timeout`` expired; the work goes on on the server
130   interrupted (Ctrl-C); work the server accepted goes on
====  =====================================================================

Errors are printed to stderr as one line; for an API error it names the API's
``error_code``, the HTTP status and the request id.
"""
import argparse

from steward.client.errors import (  # noqa: F401 - the CLI's public names
    EXIT_API_ERROR, EXIT_INTERRUPTED, EXIT_NOT_ALLOWED, EXIT_NOT_FOUND, EXIT_OK,
    EXIT_TIMEOUT, EXIT_UNREACHABLE, EXIT_USAGE, CliError, NotFound, UsageError)


def uuid_arg(text):
    """argparse ``type=`` for a UUID argument: a malformed one is bad usage (2),
    found before anything is sent."""
    import uuid
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a UUID') from None

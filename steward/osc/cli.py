"""What the OpenStackClient plugin's commands (``openstack accelerator device
clean|erase record list|history list``) share: their exit codes and errors, and
UUID arguments; waiting with progress is steward/osc/progress.py.

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

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_NOT_ALLOWED = 4
EXIT_UNREACHABLE = 5
EXIT_TIMEOUT = 6
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An error the CLI reports as one line on stderr and an exit code.

    ``error_code``, ``status`` and ``request_id`` are set for errors the API
    answered; they are printed after the message.
    """

    exit_code = EXIT_API_ERROR
    label = 'error'       # steward: <label>: <message>

    def __init__(self, message, exit_code=None, error_code=None, status=None,
                 request_id=None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.error_code, self.status, self.request_id = error_code, status, request_id

    def __str__(self):
        details = [f'error_code={self.error_code}' if self.error_code else None,
                   f'HTTP {self.status}' if self.status else None,
                   f'request_id={self.request_id}' if self.request_id else None]
        details = ', '.join(d for d in details if d)
        return f'{self.message} ({details})' if details else self.message


class UsageError(CliError):
    exit_code = EXIT_USAGE


class NotFound(CliError):
    exit_code = EXIT_NOT_FOUND


def uuid_arg(text):
    """argparse ``type=`` for a UUID argument: a malformed one is bad usage (2),
    found before anything is sent."""
    import uuid
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a UUID') from None

"""What the OpenStackClient plugin's commands report when they fail: their exit
codes and errors (documented in steward/client/__init__.py)."""

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

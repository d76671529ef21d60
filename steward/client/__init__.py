"""The operator CLI's client side: ``steward device|deployable|profile|arq ...``.

The commands talk to the accelerator API (never to the database) through
``session.Client``, print with ``output`` and wait with ``progress``; every
command module's ``main(argv)`` is ``run(build_parser, argv)``.

Exit codes, the same for every client command (doc/cli.md; scripts rely on them):

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

Errors are printed to stderr as one line, ``steward: error: <message>`` followed,
for an API error, by the API's ``error_code``, the HTTP status and the request id.
A traceback is printed only with ``--debug``.
"""
import argparse
import sys

from steward.client.errors import (  # noqa: F401 - the CLI's public names
    EXIT_API_ERROR, EXIT_INTERRUPTED, EXIT_NOT_ALLOWED, EXIT_NOT_FOUND, EXIT_OK,
    EXIT_TIMEOUT, EXIT_UNREACHABLE, EXIT_USAGE, CliError, NotFound, UsageError)


class HelpFormatter(argparse.HelpFormatter):
    """Usage lines without the dozen connection options (``--help`` still lists
    them in their own group)."""

    def add_usage(self, usage, actions, groups, prefix=None):
        actions = [a for a in actions if not getattr(a, 'connection_option', False)]
        return super().add_usage(usage, actions, groups, prefix)


def add_action(subparsers, name, parents, func, **kwargs):
    """The sub-command ``name`` (``steward <resource> <name>``), which runs
    ``func(client, args)``; ``parents``: what ``run`` hands ``build_parser``."""
    parser = subparsers.add_parser(name, parents=parents, formatter_class=HelpFormatter,
                                   **kwargs)
    parser.set_defaults(func=func)
    return parser


def uuid_arg(text):
    """argparse ``type=`` for a UUID argument: a malformed one is bad usage (2),
    found before anything is sent."""
    import uuid
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a UUID') from None


def combined_exit_code(codes):
    """One exit code for several failures (``profile delete A B``): theirs when
    they all agree, else 1."""
    codes = set(codes)
    if not codes:
        return EXIT_OK
    return codes.pop() if len(codes) == 1 else EXIT_API_ERROR


def for_each(items, action, what):
    """``action(item)`` for every item, going on after a failure (each is
    reported); the exit code combines the failures'."""
    failed = []
    for item in items:
        try:
            action(item)
        except CliError as err:
            error(err)
            failed.append(err.exit_code)
    if failed and len(items) > 1:
        error(f'{len(failed)} of {len(items)} {what} failed')
    return combined_exit_code(failed)


def error(err, label='error'):
    print(f'steward: {getattr(err, "label", label)}: {err}', file=sys.stderr)


def run(build_parser, argv):
    """Parse ``argv`` and run the chosen action; returns the exit code.

    ``build_parser(parents)`` returns an ``argparse.ArgumentParser`` whose
    sub-commands take ``parents`` (so their ``--help`` lists the connection
    options) and set ``func(client, args)`` as a default. The connection options
    (``--os-*``, ``--debug``, ...) are accepted anywhere on the line: they are
    taken out first, then the rest is parsed.
    """
    from steward.client import session

    argv = list(argv)
    try:
        conn_args, rest = session.connection_parser(argv).parse_known_args(argv)
        parser = build_parser([session.connection_parser(argv)])
    except CliError as err:
        error(err)
        return err.exit_code
    args = parser.parse_args(rest)          # argparse exits 2 on bad usage
    for key, value in vars(conn_args).items():
        setattr(args, key, value)
    _configure_logging(args.debug)
    client = session.Client(args)
    try:
        code = args.func(client, args) or EXIT_OK
        sys.stdout.flush()     # a closed pipe shows here, not at interpreter exit
        return code
    except CliError as err:
        error(err)
        return err.exit_code
    except KeyboardInterrupt:
        print('steward: interrupted', file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader has what it wanted (`steward device list -f value | head -n 1`):
        # not a failure, or such pipelines would fail under `set -o pipefail`.
        _silence_stdout()
        return EXIT_OK
    except Exception as err:  # a bug: one line unless --debug, never a bare traceback
        if args.debug:
            import traceback
            traceback.print_exc()
        error(f'unexpected {type(err).__name__}: {err} (rerun with --debug for the '
              f'traceback)')
        return EXIT_API_ERROR
    finally:
        client.close()


def _configure_logging(debug):
    import logging
    root = logging.getLogger()
    if debug:
        # keystoneauth logs each request as a curl command line, and the answer.
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format='%(levelname)s %(name)s: %(message)s')
    else:
        # keystoneauth and urllib3 warn through logging; the CLI reports errors itself.
        root.addHandler(logging.NullHandler())
        root.setLevel(logging.CRITICAL)


def _silence_stdout():
    # Point stdout at /dev/null so the interpreter's final flush does not raise
    # again.
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

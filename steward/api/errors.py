"""The one place API errors become HTTP responses.

Every error leaves as one JSON document (never HTML, never a traceback)::

    {"error_message": "<text>", "faultstring": "<text>",
     "error_code": "cyb.<area>.<what>", "request_id": "req-..."}

``error_message`` is what python-cyborgclient prints; openstacksdk reads
``faultstring`` from the root object (its WSME fallback). Upstream double-encoded
a JSON (or HTML) document inside ``error_message`` (defect 5); this does not.

Handlers and the router raise ``steward.common.exception`` errors (an unknown
path is PathNotFound, a wrong method MethodNotAllowed with ``Allow``);
``unexpected()``, called from the outermost API middleware, renders them, maps
an outage of a service behind the API to 503, and logs anything else with its
traceback and answers a clean 500.
"""
import json
import logging

from steward.common import exception

LOG = logging.getLogger(__name__)

JSON_TYPE = 'application/json'


def _message(exc):
    """The error's own text. ``msg``, not ``str()``: oslo.messaging rebuilds an
    error raised in a remote conductor with the remote traceback appended to
    ``str()`` (upstream leaked those tracebacks, defect 1)."""
    message = getattr(exc, 'msg', None) or str(exc)
    return message.split('\nTraceback', 1)[0].strip()


def render(exc, request_id, headers=None):
    """(status, [(name, value)], body bytes) for a StewardError."""
    message = _message(exc)
    body = json.dumps({'error_message': message, 'faultstring': message,
                       'error_code': exc.code, 'request_id': request_id}).encode()
    out = [('content-type', JSON_TYPE)]
    out.extend(getattr(exc, 'headers', None) or ())   # e.g. WWW-Authenticate
    out.extend(headers or ())
    return exc.status, out, body


def _log(exc, request_id, method, path):
    if exc.status >= 500:
        LOG.error('%s %s failed (%s): %s request_id=%s', method, path, exc.code,
                  _message(exc), request_id)
    else:
        LOG.info('%s %s answered %d (%s): %s request_id=%s', method, path, exc.status,
                 exc.code, _message(exc), request_id)


# What a conductor's error is called once oslo.messaging carried it back: the
# database gone (oslo.db's filters, or the driver's own error) or a deadlock its
# retries (steward/db/retry.py) did not get past.
_REMOTE_DATABASE_OUTAGES = {
    'OperationalError': 'the conductor lost its connection',
    'InterfaceError': 'the conductor lost its connection',
    'DBConnectionError': 'the conductor lost its connection',
    'DBDeadlock': 'a write kept failing on a deadlock; try again',
}


def _database_reason(exc):
    inner = getattr(exc, 'inner_exception', None) or exc
    inner = getattr(inner, 'orig', None) or inner
    return str(inner).split('\n')[0][:200]


def outage(exc):
    """A failure of a service behind the API (database, broker, conductor) is a 503
    the client may retry, not a 500 bug report. Returns None for anything else.
    (Placement's outages are already exception.PlacementUnavailable, a 503.)"""
    import oslo_messaging
    from oslo_db import exception as db_exc
    import sqlalchemy.exc
    if isinstance(exc, (db_exc.DBConnectionError, db_exc.DBDeadlock)):
        # DBDeadlock here: the write's retries ran out (steward/db/retry.py).
        return exception.ServiceUnavailable(service='The database',
                                            reason=_database_reason(exc))
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and (
            exc.connection_invalidated or isinstance(exc, sqlalchemy.exc.OperationalError)):
        return exception.ServiceUnavailable(service='The database',
                                            reason=_database_reason(exc))
    if isinstance(exc, (sqlalchemy.exc.TimeoutError, sqlalchemy.exc.DisconnectionError)):
        # Every pooled connection busy for [database] pool_timeout (overload), or
        # one found dead when checked out: try again.
        return exception.ServiceUnavailable(service='The database',
                                            reason=_database_reason(exc))
    if isinstance(exc, oslo_messaging.MessagingTimeout):
        return exception.ServiceUnavailable(service='The conductor',
                                            reason='no reply in time')
    if isinstance(exc, oslo_messaging.MessageDeliveryFailure):
        return exception.ServiceUnavailable(service='The message broker',
                                            reason='message not delivered')
    if isinstance(exc, oslo_messaging.RemoteError):
        if exc.exc_type in _REMOTE_DATABASE_OUTAGES:
            return exception.ServiceUnavailable(
                service='The database', reason=_REMOTE_DATABASE_OUTAGES[exc.exc_type])
        if exc.exc_type in _REMOTE_BROKER_OUTAGES:
            return exception.ServiceUnavailable(
                service='The message broker',
                reason='the conductor could not reach an agent or its broker')
        return None         # the conductor's own failure: a bug, logged as one
    if isinstance(exc, oslo_messaging.rpc.client.RPCVersionCapError):
        return exception.RPCVersionCapped(version=getattr(exc, 'version', '?'),
                                          cap=getattr(exc, 'version_cap', '?'))
    return _broker_outage(exc)


# What the conductor's broker errors are called once carried back.
_REMOTE_BROKER_OUTAGES = frozenset({'MessageDeliveryFailure',
                                    'MessagingTimeout', 'MessageUndeliverable'})


def _broker_outage(exc):
    """The broker unreachable, whichever layer noticed: oslo.messaging's own
    errors (a delivery given up, a send that failed), or kombu's
    OperationalError, which oslo.messaging's connection pool lets through when a
    new connection cannot be opened within the call's ``retry``; a socket
    refused or reset on the way."""
    import kombu.exceptions
    import oslo_messaging
    if isinstance(exc, (oslo_messaging.MessagingException,
                        kombu.exceptions.OperationalError)):
        reason = str(exc).split('\n')[0][:200] or type(exc).__name__
        return exception.ServiceUnavailable(service='The message broker',
                                            reason=reason)
    if isinstance(exc, ConnectionError):
        return exception.ServiceUnavailable(service='A service behind the API',
                                            reason=str(exc)[:200] or type(exc).__name__)
    return None


def unexpected(exc, request_id, method, path):
    """A bug or an unforeseen failure: log the traceback, answer a clean 500.
    (Errors that are not bugs are rendered as such.)"""
    exc = outage(exc) or exc
    if isinstance(exc, exception.StewardError):
        _log(exc, request_id, method, path)
        return render(exc, request_id)
    LOG.error('%s %s: unexpected error request_id=%s', method, path, request_id,
              exc_info=(type(exc), exc, exc.__traceback__))
    return render(exception.StewardError(), request_id)

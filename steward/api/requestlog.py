"""One INFO line per request, as Placement's request log (placement/requestlog.py)::

    192.0.2.7 "GET /v2/devices?type=GPU" status: 200 len: 312 microversion: 2.6 time: 0.004121

on its own logger, ``steward.api.requestlog``, so operators can raise it to WARNING
(``default_log_levels = steward.api.requestlog=WARN``) or send it elsewhere. The
request id is in the log context (``%(request_id)s`` of oslo.log's context
format). The line is written once the answer is sent, on the event loop: two
monotonic clock reads and one record, whose cost is oslo.log's for any line
(about 70 us of CPU to a log file, most of it its context formatter; measured
in-process, that is what removing the framework's layers saved, and less than a
tenth of a bind). Raising the logger to WARNING skips it entirely.
"""
import logging
import time

from oslo_context import context as oslo_context

LOG = logging.getLogger(__name__)

FORMAT = '%s "%s %s" status: %d len: %d microversion: %s time: %.6f'


class RequestLog:
    """Outermost but for the proxy headers (steward/api/proxy.py), whose client
    address it logs: it sees every answer, errors and /healthcheck included."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope['type'] != 'http' or not LOG.isEnabledFor(logging.INFO):
            return await self.app(scope, receive, send)
        started = time.monotonic()
        status = 0
        length = 0

        async def logged_send(message):
            nonlocal status, length
            if message['type'] == 'http.response.start':
                status = message['status']
            else:
                length += len(message.get('body', b''))
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            self._log(scope, status, length, time.monotonic() - started)

    @staticmethod
    def _log(scope, status, length, elapsed):
        client = scope.get('client')
        query = scope.get('query_string')
        path = scope.get('steward.original_path') or scope['path']
        if query:
            path = f'{path}?{query.decode("latin-1")}'
        version = scope.get('steward.version')
        context = scope.get('steward.context')
        if context is None:
            # Refused before authentication, or outside /v2: the request id alone.
            request_id = scope.get('steward.request_id')
            context = oslo_context.RequestContext(request_id=request_id) \
                if request_id else None
        LOG.info(FORMAT, client[0] if client else '-', scope['method'], path,
                 status, length, version if version is not None else '-', elapsed,
                 extra={'context': context} if context is not None else None)

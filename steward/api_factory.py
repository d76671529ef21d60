"""The API application of the standalone ``steward api`` service.

``[api] workers`` > 1 runs that many uvicorn worker processes; each imports this
module by name and calls ``create_app()``, so each parses the configuration the
parent was started with (its argv travels in ``ARGV_ENV``) and opens its own
broker connection and database pool. Nothing is shared between workers but the
listening socket: every state change is a conditional UPDATE or a row lock in the
database, which is what keeps several workers (and several API hosts) correct.
"""
import json
import os

from steward import service
from steward.common import lifetime

ARGV_ENV = 'STEWARD_API_ARGV'
# The pid of the `steward api` process whose workers these are.
PARENT_ENV = 'STEWARD_API_PARENT'
IMPORT_STRING = 'steward.api_factory:create_app'


def build():
    """The app for an already configured process: conductors over RPC, capped at
    ``[upgrade_levels] conductor``."""
    from steward.api import app as api_app
    from steward.conductor import rpcapi
    app = api_app.create_app(
        rpcapi.ConductorAPI(version_cap=service.rpc_version_cap('conductor')))
    service.settle_heap()
    return app


def create_app():
    """uvicorn's factory, called once in each worker process."""
    parent = os.environ.get(PARENT_ENV)
    if parent:
        # uvicorn's supervisor stops its workers when it is stopped, not when it
        # is killed: a worker left behind keeps serving the port.
        lifetime.die_with_parent(int(parent))
    service.prepare(json.loads(os.environ.get(ARGV_ENV, '[]')))
    return build()

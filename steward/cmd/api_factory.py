"""The API application of the standalone ``steward api`` service and of a hosting
server (steward/wsgi/api.py): one process, or each of its gunicorn worker
processes, builds it once the configuration is parsed (a worker of ``steward
api`` inherits it from the fork; a hosting server's worker reads it at import). Nothing is
shared between workers but the listening socket: each opens its own broker
connection and database pool, and every state change is a conditional UPDATE or a
row lock in the database, which is what keeps several workers (and several API
hosts) correct. Each runs the ARQ operations itself when it can (Root.api_arqs:
a steward/arqs/api.py LocalArqAPI, else an ArqRPCAPI that sends them to the
conductors); none of them reaches an agent: what needs one goes to the
conductors, over RPC (steward/conductor/rpcapi.py ConductorAPI).
"""
from steward import process
from steward.cmd import checks
from steward.conf import CONF


def build(root=None, announce=True):
    """The app for an already configured process: the ARQ operations run here
    when the configuration allows (Root.api_arqs), everything else goes to
    conductors over RPC, capped at ``[upgrade_levels] conductor``. ``root``: the
    process's composition root (steward/cmd/root.py); None in a gunicorn worker,
    which builds its own once forked (its metrics land in the multiprocess files
    the parent serves). ``announce``: log how accelerator requests are served
    (once per process group)."""
    from steward.cmd import root as cmd_root
    from steward.conductor import rpcapi
    if root is None:
        root = cmd_root.Root(metrics=True, policy=True, transport=True)
    conductor = rpcapi.ConductorAPI(transport=root.transport,
                                    version_cap=checks.rpc_version_cap('conductor'))
    app = root.api_app(conductor, root.api_arqs(conductor, announce=announce),
                       transport_url=root.transport.url, processes=CONF.api.workers)
    process.settle_heap()
    return app

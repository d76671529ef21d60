"""The accelerator request (ARQ) operations: create, bind, unbind, delete, the
reservation rule they keep and Nova's events they send.

They run where the composition root (steward/cmd/root.py) puts them: in each
``steward api`` process (what a deployment runs: a boot never crosses the
broker), or in a conductor for API processes that cannot run them (an API host
whose ``[placement]`` names no service, ``[upgrade_levels] conductor`` below
1.2) and in ``steward serve``. The API reaches them through one interface,
``api.ArqAPI``: ``api.LocalArqAPI`` (the ARQService of this process) or
``api.ArqRPCAPI`` (the conductors over RPC).

* ``api.py``: that interface and its two implementations;
* ``service.py``: ``ARQService``, the operations as a caller asks for them, with
  Nova's events;
* ``ops.py``: the operations' transactions (the bind, the delete, ...);
* ``device_ops.py``: the bind guard (the devices' row locks), device_state on
  bind and release, the Placement reservation that mirrors it;
* ``reservation.py``: the one reservation rule;
* ``nova_events.py``: Nova's ``accelerator-request-bound`` events.

This package imports no service package (steward/conductor, steward/api, ...):
what only a conductor does (asking an agent to clean a released device) is
handed to it as a callable (``ARQService(dispatch_cleanup=...)``)
(tests/unit/structure/test_package_layers.py).
"""

"""``steward-privsep-helper``: a privsep daemon started through sudo or rootwrap
(``[privsep_<context>] helper_command``), for an agent that cannot fork one
itself (it has neither root nor the context's capabilities).

oslo.privsep's own ``privsep-helper`` works too, but its daemon keeps a full
bounding set and no ambient capabilities: nvme-cli run from it as root would get
every capability back. This one runs steward.privsep's daemon, fenced in as a
forked one is (it cannot use PR_SET_PDEATHSIG: the helper process that forks it
exits at once; the daemon exits when the agent's end of the socket closes).
"""
import logging as pylogging
import os
import socket
import sys

from oslo_config import cfg
from oslo_log import log as logging
from oslo_privsep import comm
from oslo_privsep import daemon
from oslo_utils import importutils

from steward.conf import CONF
from steward import privsep

LOG = logging.getLogger(__name__)


def main(argv=None):
    CONF.register_cli_opts([cfg.StrOpt('privsep_context', required=True),
                            cfg.StrOpt('privsep_sock_path', required=True)])
    logging.register_options(CONF)
    CONF(args=sys.argv[1:] if argv is None else argv, project='steward')
    logging.setup(CONF, 'steward-privsep')
    context = importutils.import_class(CONF.privsep_context)
    if not isinstance(context, privsep.Context):
        LOG.critical('--privsep_context %s is not one of %s', CONF.privsep_context,
                     ', '.join(f'steward.privsep.{n}' for n in privsep.CONTEXTS))
        return 2
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(CONF.privsep_sock_path)
    daemon.set_cloexec(sock)
    channel = comm.ServerChannel(sock)
    # The caller (sudo) waits for this process; the daemon goes on in the child,
    # in the agent's process group, so it shares the agent's fate.
    if os.fork() != 0:
        return 0
    daemon.replace_logging(daemon.PrivsepLogHandler(channel))
    pylogging.getLogger().setLevel(pylogging.INFO)
    try:
        privsep._Daemon(channel, context, None).run()
    except Exception as err:  # noqa: BLE001 - reported to the agent, then exit
        LOG.exception('privsep daemon %s failed: %s', context.name, err)
        os._exit(1)
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main())

"""API worker processes of ``steward serve`` (``[api] workers`` > 1).

One interpreter serves one request at a time, so the single-host stack grew no
faster with more clients once one client kept its process busy. The serve process
still answers the API itself (its first 200 comes as soon as it is up), and starts
``workers - 1`` helper processes that accept on the same listening socket.

Each helper runs the API over a conductor of its own, called directly as the serve
process calls its own: creates, binds and deletes run side by side in separate
processes and meet only in the database, as several conductors do (conditional
UPDATEs and row locks; on SQLite one writer queue across the processes,
steward/common/sqlite_writers.py). What only the serve process holds - the agent,
reached over the in-process transport, and the metrics registry that is scraped -
a helper reaches over a socketpair to the serve process (the relay). Each helper
has its own pair, made before it starts: no name on the host, so nothing else can
speak on it. Helpers die with the serve process; one that dies alone is replaced.
"""
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import oslo_messaging as messaging

from steward.common import exception
from steward.common import lifetime

# Named, not __name__: a worker runs this module as __main__.
LOG = logging.getLogger('steward.serve_workers')

# "LISTEN_FD,RELAY_FD" in a helper's environment, and the serve command's argv.
FDS_ENV = 'STEWARD_SERVE_HELPER_FDS'
ARGV_ENV = 'STEWARD_SERVE_ARGV'
# Seconds between two starts of a helper that keeps dying.
RESTART_DELAY = 1.0
STOP_TIMEOUT = 10.0
# Requests the helper sends without waiting for an answer.
ONE_WAY = frozenset({'record_host_version', 'metric'})


# -- in the serve process -----------------------------------------------------------
class Relay:
    """Answers one helper's requests with the serve process's AgentAPI and
    metrics, on a thread of its own."""

    def __init__(self, sock, agent_api):
        self._sock = sock
        self._agent_api = agent_api
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='serve-relay')
        self._thread.start()

    def _run(self):
        with self._sock.makefile('rb') as rfile, self._sock.makefile('wb') as wfile:
            for line in rfile:
                try:
                    request = json.loads(line)
                    op = request['op']
                except (ValueError, KeyError, TypeError):
                    LOG.error('Relay: unreadable request from an API worker dropped')
                    continue
                answer = self._answer(op, request.get('args') or {})
                if op not in ONE_WAY:
                    wfile.write(json.dumps(answer).encode() + b'\n')
                    wfile.flush()

    def _answer(self, op, args):
        from steward import metrics
        from steward.common import context
        api = self._agent_api
        try:
            if op == 'metric':
                metrics.record(args['kind'], *args['values'])
                return None
            if op == 'record_host_version':
                api.record_host_version(args['host'], args['version'])
                return None
            if op == 'can_send_version':
                return {'result': api.can_send_version(args['version'],
                                                       host=args.get('host'))}
            ctx = context.RequestContext.from_dict(args['ctx']) if args.get('ctx') \
                else None
            if op == 'ping':
                return {'result': api.ping(ctx, args['host'], timeout=args['timeout'])}
            if op == 'cleanup_device':
                return {'result': api.cleanup_device(ctx, args['host'], args['device'],
                                                     trigger=args['trigger'])}
            return {'error': {'messaging': False, 'message': f'unknown op {op!r}'}}
        except messaging.MessagingException as err:
            return {'error': {'messaging': True, 'message': str(err)}}
        except Exception as err:  # noqa: BLE001 - the helper gets it as an error
            LOG.exception('Relay: %s for an API worker failed', op)
            return {'error': {'messaging': False, 'message': str(err)}}


def _preexec():
    """The helper dies with this process, and starts with SIGINT blocked: a
    terminal's Ctrl-C reaches the whole group, and a helper still importing would
    print a KeyboardInterrupt traceback. (A mask, not a handler: it survives exec,
    and pthread_sigmask may be called from any thread.) main() unblocks it."""
    die = lifetime.preexec_die_with_parent()

    def preexec():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        die()
    return preexec


class Helpers:
    """The helper processes of this serve process, started and stopped together."""

    def __init__(self, count, listen_sock, argv, agent_api):
        self._count = count
        self._listen = listen_sock
        self._argv = argv
        self._agent_api = agent_api
        self._procs = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = None

    def start(self, when=lambda: True):
        """Start the helpers once ``when()`` is true (the serve process answers:
        their imports would otherwise take a core from its own start), from a
        thread that then replaces one that dies. They die with that thread, which
        lives until stop()."""
        self._watcher = threading.Thread(target=self._watch, args=(when,),
                                         daemon=True, name='serve-helpers')
        self._watcher.start()

    def _spawn(self, slot):
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env[FDS_ENV] = f'{self._listen.fileno()},{theirs.fileno()}'
        env[ARGV_ENV] = json.dumps(self._argv)
        try:
            proc = subprocess.Popen(
                [sys.executable, '-m', 'steward.serve_workers'], env=env,
                stdin=subprocess.DEVNULL, close_fds=True,
                pass_fds=(self._listen.fileno(), theirs.fileno()),
                preexec_fn=_preexec())
        finally:
            theirs.close()
        Relay(ours, self._agent_api)
        with self._lock:
            self._procs[slot] = proc

    def _watch(self, when):
        while not when():
            if self._stopping.wait(0.02):
                return
        for slot in range(self._count):
            self._spawn(slot)
        LOG.debug('API worker processes %s started', self.pids())
        while not self._stopping.wait(0.5):
            with self._lock:
                dead = [(slot, p) for slot, p in self._procs.items()
                        if p.poll() is not None]
            for slot, proc in dead:
                # A stop signal sent to the whole group reaches the helpers as
                # soon as this process: give this process the time to notice.
                if self._stopping.wait(RESTART_DELAY):
                    return
                LOG.error('API worker process %d exited with status %s; starting '
                          'another', proc.pid, proc.returncode)
                self._spawn(slot)

    def pids(self):
        with self._lock:
            return [p.pid for p in self._procs.values()]

    def stop(self):
        """SIGTERM every helper (each finishes its requests in flight) and wait."""
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(STOP_TIMEOUT)     # no start after this point
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- in a helper --------------------------------------------------------------------
class RelayClient:
    def __init__(self, sock):
        self._lock = threading.Lock()
        self._rfile = sock.makefile('rb')
        self._wfile = sock.makefile('wb')

    def request(self, op, **args):
        line = json.dumps({'op': op, 'args': args}).encode() + b'\n'
        with self._lock:
            self._wfile.write(line)
            self._wfile.flush()
            if op in ONE_WAY:
                return None
            raw = self._rfile.readline()
        if not raw:
            raise exception.ServiceUnavailable(service='steward serve',
                                               reason='the relay to the agent closed')
        answer = json.loads(raw)
        error = answer.get('error')
        if error:
            if error['messaging']:
                raise messaging.MessagingException(error['message'])
            raise exception.ServiceUnavailable(service='the agent relay',
                                               reason=error['message'])
        return answer.get('result')


class RelayedAgentAPI:
    """The AgentAPI of a helper's conductor: the serve process's, over the relay."""

    def __init__(self, relay):
        self._relay = relay

    def record_host_version(self, host, version):
        self._relay.request('record_host_version', host=host, version=version)

    def can_send_version(self, version, host=None):
        return self._relay.request('can_send_version', version=version, host=host)

    def ping(self, ctx, host, timeout=10):
        return self._relay.request('ping', ctx=ctx.to_dict() if ctx else None,
                                   host=host, timeout=timeout)

    def cleanup_device(self, ctx, host, device, trigger='unbind'):
        self._relay.request('cleanup_device', ctx=ctx.to_dict() if ctx else None,
                            host=host, device=device, trigger=trigger)


def main():
    from steward import metrics
    from steward import service
    from steward.api import app as api_app
    from steward.conductor import manager as conductor_manager
    from steward.conductor import nova
    from steward.conductor import rpcapi

    # A Ctrl-C that came while this process started is dropped; from here on
    # uvicorn takes SIGINT and SIGTERM as a stop, as the serve process does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    listen_fd, relay_fd = (int(fd) for fd in os.environ[FDS_ENV].split(','))
    service.prepare(json.loads(os.environ.get(ARGV_ENV, '[]')))
    relay = RelayClient(socket.socket(fileno=relay_fd))
    metrics.forward_to(lambda kind, values: relay.request('metric', kind=kind,
                                                          values=list(values)))
    conductor = conductor_manager.ConductorManager(
        service.placement_client(), agent_api=RelayedAgentAPI(relay),
        notifier=nova.NovaNotifier(announce=False))
    app = api_app.create_app(rpcapi.ConductorAPI(conductor))
    service.settle_heap()
    LOG.info('API worker process %d serving beside steward serve %d', os.getpid(),
             os.getppid())
    service.serve_http_on(app, socket.socket(fileno=listen_fd))
    conductor.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())

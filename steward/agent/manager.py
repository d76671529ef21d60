"""The agent: runs the drivers of one host and reports what they find."""
import json
import logging
import time

import oslo_messaging as messaging

from steward.agent import cleanup
from steward.agent import drivers as driver_loader
from steward.agent import reporting
from steward.agent import rpcapi
from steward.common import context
from steward.common import exception
from steward.common import ticker

LOG = logging.getLogger(__name__)


class AgentManager:
    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self, conf, conductor_api, host=None, drivers=None, on_fatal=None):
        self.conf = conf
        # Called (from the discovery thread) when the agent cannot do its job: the
        # service stops the process with a failure status (steward/process.py).
        self.on_fatal = on_fatal
        self.fatal = None
        self.host = host or conf.host
        self.rp_name = (conf.agent.resource_provider_name
                        or conf.placement.compute_node_name or self.host)
        self.conductor = conductor_api
        self.reports = reporting.ReportSender(conductor_api, self.host, self.rp_name)
        self.drivers = drivers if drivers is not None else driver_loader.load(
            conf.agent.enabled_drivers, conf, self.host)
        self._thread = None     # the discovery Ticker
        self.cycles = 0
        self.recovered = False
        self.last_cycle_seconds = None
        self.cleaner = cleanup.CleanupExecutor(
            conductor_api, self.drivers, self.host,
            timeout=lambda: self.conf.nvme.cleanup_timeout)

    # -- RPC endpoints -------------------------------------------------------------
    def ping(self, ctx):
        return {'host': self.host, 'version': rpcapi.RPC_API_VERSION}

    def cleanup_device(self, ctx, device, trigger='unbind'):
        """1.1 (cast): clean a released device in the background (spec 1)."""
        if not isinstance(device, dict) or not device.get('uuid'):
            LOG.error('cleanup_device without a device uuid ignored: %r', device)
            return
        LOG.info('cleanup_device %s (%s) request_id=%s', device.get('uuid'), trigger,
                 getattr(ctx, 'request_id', None))
        self.cleaner.submit(device, trigger=trigger, ctx=ctx)

    def report_again(self, ctx):
        """1.2 (cast): a conductor could not take this host's quiet report by its
        digest (a restored database, a host forgotten for a repair): the whole
        report, now."""
        LOG.info('A conductor asked for the whole report of host %s request_id=%s',
                 self.host, getattr(ctx, 'request_id', None))
        self.reports.resend_next()
        if self._thread is not None:
            self._thread.run_soon()

    # -- lifecycle -----------------------------------------------------------------
    def init_host(self):
        ctx = context.get_admin_context()
        for driver in self.drivers:
            driver.init_host(ctx)
        self.recover()
        LOG.info('Agent %s reports under compute node %r with drivers %s', self.host,
                 self.rp_name, [d.name for d in self.drivers])

    def recover(self):
        """Crash recovery before the first discovery: cleanups this agent did not
        see finish go to error, missed cleanups start, reservation drift is logged.
        Without a conductor to ask (it may start after the agent) it is retried
        before every discovery cycle until it has run once."""
        try:
            info = cleanup.recover(self.conductor, self.drivers, self.host, self.cleaner,
                                   rpcapi.RPC_API_VERSION)
        except (exception.StewardError, messaging.MessagingException) as err:
            LOG.warning('Start-up recovery of %s could not run yet (%s); retrying '
                        'before the next discovery', self.host, err)
            return None
        self.recovered = True
        return info

    def discover(self):
        """One discovery over every driver, in [agent] enabled_drivers order.

        The same device (control-path id) from two drivers is ambiguous. Two
        mdev-capable drivers (``shares_parents``: the generic mdev driver and a
        vendor's) may both see a parent: warn, the first listed wins (spec 2).
        Anything else is a configuration error that stops the agent.
        """
        devices, owner = [], {}
        for driver in self.drivers:
            for dev in driver.discover():
                dev.driver_name = dev.driver_name or driver.name
                key = json.dumps(json.loads(dev.controlpath_id.cpid_info), sort_keys=True)
                first = owner.get(key)
                if first is not None:
                    where = _readable_cpid(key)
                    if first.shares_parents and driver.shares_parents:
                        LOG.warning('Drivers %s and %s both report %s; %s (listed first) '
                                    'keeps it', first.name, driver.name, where, first.name)
                        continue
                    raise exception.InvalidConfiguration(
                        reason=f'device {where} is reported by both {first.name} and '
                               f'{driver.name}; enable one driver per device')
                owner[key] = driver
                devices.append(dev)
        return devices

    def run_cycle(self):
        start = time.monotonic()
        devices = self.discover()
        ctx = context.get_admin_context()
        ctx.update_store()      # this cycle's request id on its log lines
        self.reports.conductor = self.conductor     # a test may have replaced it
        result = self.reports.send(ctx, [d.to_dict() for d in devices])
        if result.get('error'):
            LOG.error('The conductor could not register this host\'s devices in '
                      'Placement: %s (%s)', result['error']['message'],
                      result['error']['code'])
        self.cycles += 1
        self.last_cycle_seconds = time.monotonic() - start
        return result

    def start(self):
        """Discovery every [agent] discovery_interval seconds (counted from the end
        of the previous cycle, read before each wait so that a reload changes it),
        first at once."""
        self._thread = ticker.Ticker('steward-discovery', self._cycle,
                                     lambda: self.conf.agent.discovery_interval,
                                     at_once=True)
        self._thread.start()

    def reloaded(self, changed):
        """The configuration was reloaded (SIGHUP): a new discovery interval counts
        from now. ([nvme] cleanup_timeout is read at each cleanup.)"""
        if self._thread is not None and ('agent', 'discovery_interval') in changed:
            self._thread.wake()

    def _cycle(self):
        try:
            if not self.recovered:
                self.recover()
            self.run_cycle()
        except exception.InvalidConfiguration as err:
            # Retrying cannot help and an RPC server without discovery would
            # look alive: stop the whole agent, with one line saying why.
            LOG.error('Agent %s stopping: invalid configuration: %s', self.host, err)
            self.fatal = err
            if self.on_fatal is not None:
                self.on_fatal(err)
            return False
        except Exception:
            LOG.exception('Discovery cycle failed; retrying in %ss',
                          self.conf.agent.discovery_interval)

    def stop(self):
        if self._thread is not None:
            self._thread.stop(10)
            self._thread = None
        self.cleaner.stop()


def _readable_cpid(key):
    try:
        d = json.loads(key)
        return f"{d['domain']}:{d['bus']}:{d['device']}.{d['function']}"
    except (ValueError, KeyError, TypeError):
        return key

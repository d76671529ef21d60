"""The digest of an agent's report, computed alike by the agent and the conductor.

It covers the compute-node name and every reported device but the times of their
health readings (a reading's time changes every cycle: no change, issue 38). Two
reports with one digest write the same rows and the same providers, so a
conductor that finds a host's digest stored in the database (the
``host_reports`` table, written once the report's rows and providers are in
place) has nothing to do for it.

An agent whose report has the digest a conductor last acknowledged sends only
the digest (conductor RPC 1.3 ``report_unchanged``); the conductor answers
``resend`` when the database holds another (or none), and the agent sends the
whole report. Once a conductor's answer says it can reach the agent
(``quiet_cast``), the digest goes as a cast (conductor RPC 1.4
``report_quiet``), and a conductor that cannot take it asks the agent for the
whole report (agent RPC 1.2 ``report_again``).
"""
import hashlib
import json

# The conductor RPC version that brought report_unchanged
# (steward/conductor/rpcapi.py REPORT_DIGEST_VERSION).
CONDUCTOR_RPC_VERSION = '1.3'
# The agent RPC version that brought report_again, which lets quiet reports be
# casts (conductor RPC 1.4 report_quiet; steward/agent/rpcapi.py).
AGENT_RPC_VERSION = '1.2'


def without_read_at(devices):
    """Report payloads (DriverDevice dicts) without their readings' times: what a
    report's digest covers."""
    out = []
    for d in devices:
        h = d.get('health') if isinstance(d, dict) else None
        if isinstance(h, dict) and 'read_at' in h:
            d = dict(d, health={k: v for k, v in h.items() if k != 'read_at'})
        out.append(d)
    return out


def newest_read_at(devices):
    """The newest reading time of a report's devices (an ISO 8601 text), or None."""
    times = [d['health']['read_at'] for d in devices
             if isinstance(d, dict) and isinstance(d.get('health'), dict)
             and d['health'].get('read_at')]
    return max(times) if times else None


def digest(rp_name, devices):
    """``devices``: the report's DriverDevice dicts, as sent over RPC."""
    return hashlib.sha1(json.dumps([rp_name, without_read_at(devices)],
                                   sort_keys=True).encode()).hexdigest()

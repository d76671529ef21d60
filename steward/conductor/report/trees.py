"""Every compute node's tree from one listing of Placement's providers, for the
first registrations of a burst (a new region, a conductor database restored
empty: thousands of hosts report for the first time within minutes).

Beside Nova, a host's first registration reads Placement twice before it
writes: its compute node by name, then that node's tree (for the devices Nova
hands out, and the device providers already there). Two reads per host cost
Placement more than listing every provider once does for a few dozen hosts (at
10 300 providers, one listing cost it 240 ms of CPU and the two reads of one
host 4.8 ms: bench/placement_requests.py, 2026-11-28), and the listing answers
every host that reports while it is fresh. So while first registrations arrive faster than
a listing pays for itself, the batches (steward/conductor/report/first.py) take
one listing and share it for ``MAX_AGE`` seconds; a host not in it (its
compute node registered since) is looked up alone, as before.

A listing is as old as ``MAX_AGE`` at most: a provider Nova added under a
compute node since then is not in it. The one-host read has the same window,
only shorter (Nova may add it a moment after the read, too), and what the batch
writes from a stale tree is checked by Placement: a device provider that exists
after all answers 409 and goes through the single provider's sync.
"""
import collections
import logging
import threading
import time

from steward.common import exception

LOG = logging.getLogger(__name__)

# Seconds one listing answers for.
MAX_AGE = 10.0
# Providers a listing can hold for the price of one host's two reads: listing
# 10 300 cost Placement 240-250 ms of CPU, as much as the reads of 50-54 hosts
# (4.6-4.8 ms each), bench/placement_requests.py on 2026-11-28 and 29. (The conductor's side favours
# the listing more: one JSON body against two requests a host.)
PROVIDERS_PER_HOST = 170
# Hosts asked for within MAX_AGE before the first listing is taken (its size
# unknown until then).
MIN_HOSTS = 16


class Trees:
    """Listings of Placement's providers through ``placement`` (the conductor's
    PlacementClient), shared by the first-registration batches of one conductor."""

    def __init__(self, placement, clock=time.monotonic):
        self.placement = placement
        self._clock = clock
        self._lock = threading.Lock()
        self._asked = collections.deque()     # (time, hosts asked for)
        self._taken_at = None
        self._size = None                     # providers in the last listing
        self._roots = {}                      # compute node name -> (uuid, tree)

    def lookup(self, rp_names):
        """{compute node name: (its uuid, the providers of its tree, itself
        included)} of those of ``rp_names`` in a fresh listing; one is taken
        first when the names asked for lately make it cheaper than their reads.
        Names not in the answer are looked up one by one."""
        if not rp_names:
            return {}
        with self._lock:
            now = self._clock()
            self._asked.append((now, len(rp_names)))
            while self._asked and self._asked[0][0] < now - MAX_AGE:
                self._asked.popleft()
            if self._taken_at is None or now - self._taken_at > MAX_AGE:
                self._roots = {}
                if self._worth_listing(sum(n for _, n in self._asked)):
                    self._take(now)
            roots = self._roots
        return {name: roots[name] for name in rp_names if name in roots}

    def _worth_listing(self, asked):
        if self._size is None:
            return asked >= MIN_HOSTS
        return asked * PROVIDERS_PER_HOST >= self._size

    def _take(self, now):
        try:
            providers = self.placement.list_providers()
        except exception.StewardError as err:
            LOG.info('Placement: listing every provider failed (%s); each compute '
                     'node is looked up alone', err)
            return
        trees = collections.defaultdict(list)
        for rp in providers:
            trees[rp.get('root_provider_uuid') or rp['uuid']].append(rp)
        self._roots = {rp['name']: (rp['uuid'], trees[rp['uuid']]) for rp in providers
                       if not rp.get('parent_provider_uuid')}
        self._taken_at, self._size = now, len(providers)
        LOG.info('Placement: %d providers under %d compute nodes listed for the '
                 'first registrations of many hosts', len(providers), len(self._roots))

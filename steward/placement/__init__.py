"""OpenStack Placement: Steward's client and the embedded real Placement service.

``client.PlacementClient`` keeps the provider tree in Placement matching the devices
Steward manages, with as few writes as possible (its HTTP in ``transport``, its
memory in ``provider_cache``, its syncs in ``provider_sync`` and ``tree_sync``).
``embedded`` runs the real
openstack-placement WSGI app (SQLite, noauth2) for single-host and test stacks.
Neither module is imported here: importing ``embedded`` pulls in the whole
Placement stack, which API and agent processes that talk to a remote Placement
have no use for.
"""

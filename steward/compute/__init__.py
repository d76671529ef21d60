"""The compute side: what nova-conductor and nova-compute do for an instance with
accelerators, as a library a Nova driver or any orchestrator can call.

* ``request``: flavor + device profile -> Placement granular request
* ``scheduler``: allocation candidates, claim, release (real Placement)
* ``arq_flow``: create ARQs, match them to providers, bind, wait, resolve, undo
* ``events``: the os-server-external-events listener a boot waits on
* ``handles``: reading attach_handle_info (PCI addresses, managed, mdev parents)
* ``domain_xml``: libvirt domain XML with PCI and mdev hostdevs (lxml)
* ``mdev``: persistent mdevs before the domain, removal on delete
* ``nova_devices``: the spec-5 warning for devices Nova also claims
* ``state``: the instances this host booted (JSON files)
* ``boot``: the whole boot and delete, with rollback
"""

"""No Placement write outside the Placement layer.

Steward's providers, inventories, traits and reservations are written by
steward/placement (its client: what it remembers of each provider stays true
only if every write goes through it). A module elsewhere that sends Placement a
PUT, POST, DELETE or PATCH of its own is found here: a call whose arguments name
a write method (or a ``put``/``post``/``delete``/``patch`` method called) and a
Placement URL (a string starting with one of Placement's collections, in an
f-string or a concatenation too).
"""
import ast

from tests.unit.structure.test_import_cycles import _modules

LAYER = 'steward.placement'
WRITE_METHODS = frozenset({'PUT', 'POST', 'DELETE', 'PATCH'})
PLACEMENT_PATHS = ('/resource_providers', '/allocations', '/reshaper', '/traits',
                   '/resource_classes', '/inventories', '/aggregates', '/usages')
# module: why it may write Placement itself.
ALLOWED = {
    'steward.compute.scheduler': "plays nova-scheduler and nova-compute on the single "
                                 "host (steward compute boot): the allocations and the "
                                 "compute node's own inventory and OWNER_NOVA are Nova's "
                                 "writes, not Steward's",
}


def _strings(node):
    """The string constants in ``node``, an f-string's literal parts included."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def _is_write(call):
    args = list(call.args) + [k.value for k in call.keywords]
    strings = [s for arg in args for s in _strings(arg)]
    method = (isinstance(call.func, ast.Attribute)
              and call.func.attr.upper() in WRITE_METHODS) or \
        any(s in WRITE_METHODS for s in strings)
    return method and any(s.startswith(PLACEMENT_PATHS) for s in strings)


def placement_writes(source, filename='<source>'):
    """(line, source text) of each Placement write call in ``source``."""
    tree = ast.parse(source, filename)
    return sorted((node.lineno, ast.get_source_segment(source, node).split('\n')[0])
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _is_write(node))


def writes_outside_the_layer():
    """{module: [(line, text), ...]} of the modules outside steward/placement that
    write Placement."""
    found = {}
    for module, path in sorted(_modules().items()):
        if module == LAYER or module.startswith(LAYER + '.'):
            continue
        writes = placement_writes(path.read_text(), str(path))
        if writes:
            found[module] = writes
    return found


def test_a_placement_write_is_found_in_any_shape():
    source = '''
def f(placement, adapter, session, path, uuid):
    placement.call('PUT', path + '/traits', {'traits': []})
    placement.call('DELETE', f'/allocations/{uuid}', ok=(204, 404))
    adapter.put('/resource_providers/%s/inventories' % uuid, json={})
    session.request(method='POST', url='/reshaper', json={})
    placement.get('/resource_providers', {'name': 'cn1'})
    placement.call('GET', path + '/traits')
    client.call('POST', '/accelerator_requests', ok=(201,))
    adapter.delete(f'/v2/device_profiles/{uuid}')
'''
    assert [line for line, _ in placement_writes(source)] == [3, 4, 5, 6]


def test_nothing_outside_the_placement_layer_writes_placement():
    found = {module: writes for module, writes in writes_outside_the_layer().items()
             if module not in ALLOWED}
    assert not found, 'Placement written outside steward/placement:\n' + '\n'.join(
        f'  {module}:{line}: {text}' for module, writes in found.items()
        for line, text in writes)


def test_every_module_allowed_to_write_placement_still_does():
    assert set(ALLOWED) <= set(writes_outside_the_layer())


def test_the_placement_client_is_seen_writing():
    # The rule would hold vacuously if the scan missed the layer's own writes: the
    # client's modules (its single writes, one provider's sync, a tree's sync) are
    # each seen writing.
    from steward.placement import client, provider_sync, tree_sync
    counts = {}
    for module in (client, provider_sync, tree_sync):
        with open(module.__file__) as f:
            counts[module.__name__] = len(placement_writes(f.read()))
    assert all(counts.values()) and sum(counts.values()) >= 5, counts

"""Nova 34 consumes Steward's bound ARQs: run INSIDE .venv-nova, never by pytest.

    STEWARD_NOVA_IN=<request.json> STEWARD_NOVA_OUT=<result.json> \
    PYTHONPATH=[.venv-nova/patched:]tests/nova .venv-nova/bin/python -m testtools.run \
        nova_consumer.StewardArqsTestCase.test_consume

PYTHONPATH with ``.venv-nova/patched`` first runs Nova with Steward's series
(tools/nova-series.sh), without it the released nova 34.0.0. The request names a
Cyborg-v2 endpoint (``steward serve``) and instances whose ARQs are bound there.
For each instance, what nova-compute does at spawn (nova/virt/libvirt/driver.py
``spawn``): Nova's own Cyborg client (``nova.accelerator.cyborg``, keystoneauth
through openstacksdk, ``[cyborg] endpoint_override``) reads the resolved ARQs,
``_allocate_cyborg_mdevs`` makes the MDEV ARQs' mdevs, and ``_get_guest_config``
builds the guest, whose ``to_xml()`` is written out. The harness is Nova's own
``LibvirtConnTestCase`` (its fakelibvirt fixture, its instance and image); the
only addition is a record of the node devices Nova asks libvirt to create
(fakelibvirt accepts any and keeps none), so the caller sees the mdev parent name.

With the series, the request may also name ``moves``: pairs of instances whose
bound ARQs stand for one instance's source and destination sets of a live
migration (contrib/nova 0005). For each, what the two hosts' libvirt drivers do:
the source's guest built from the source set; the destination's
``pre_live_migration`` (which creates the destination set's mdevs) and the guest
the destination builds from its set; the migrating domain XML
(``nova.virt.libvirt.migration.get_updated_guest_xml`` over the source's guest, as
``_live_migration_operation`` calls it); and Nova's movability check
(``check_arqs_movable(live=True)``) of both sets.
"""
import json
import os

from lxml import etree
from oslo_serialization import jsonutils

from nova.accelerator import cyborg
from nova import context as nova_context
from nova import exception
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.unit.virt.libvirt import test_driver
from nova.virt import fake
from nova.virt.libvirt import config as vconfig
from nova.virt.libvirt import driver as libvirt_driver
from nova.virt.libvirt import migration as libvirt_migration


class _CreatedMdev(fakelibvirt.NodeDevice):
    def setAutostart(self, autostart):
        return 0


class _SourceGuest:
    """The source's running domain as _live_migration_operation hands it to
    get_updated_guest_xml: only its XML is read."""

    def __init__(self, xml):
        self.xml = xml

    def get_xml_desc(self, dump_migratable=False):
        return self.xml


class StewardArqsTestCase(test_driver.LibvirtConnTestCase):

    def test_consume(self):
        with open(os.environ['STEWARD_NOVA_IN']) as f:
            request = json.load(f)
        self.flags(endpoint_override=request['endpoint'], group='cyborg')
        self.flags(virt_type='kvm', group='libvirt')
        ctx = nova_context.RequestContext(
            user_id='nova', project_id='service', auth_token='admin',
            roles=['admin', 'service'], is_admin=True)
        drvr = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        created = []
        conn = drvr._host.get_connection()

        def create(xml, flags):
            # libvirt names the new mdev node device after its uuid and parent
            created.append(xml)
            doc = etree.fromstring(xml)
            parent = doc.findtext('parent')
            mdev_uuid = doc.findtext('capability/uuid')
            etree.SubElement(doc, 'name').text = 'mdev_%s_%s' % (
                mdev_uuid.replace('-', '_'), parent.split('_', 1)[-1])
            return _CreatedMdev(conn, etree.tostring(doc, encoding='unicode'))
        conn.nodeDeviceCreateXML = create
        conn.nodeDeviceDefineXML = create
        # fakelibvirt's mdev lookup raises KeyError for an mdev it does not
        # hold; libvirt raises VIR_ERR_NO_NODE_DEVICE, which is what makes
        # _allocate_cyborg_mdevs create the mdev.
        lookup = conn.nodeDeviceLookupByName

        def lookup_by_name(name):
            try:
                return lookup(name)
            except KeyError:
                raise fakelibvirt.make_libvirtError(
                    fakelibvirt.libvirtError,
                    'Node device not found: no node device with matching '
                    'name %s' % name,
                    error_code=fakelibvirt.VIR_ERR_NO_NODE_DEVICE,
                    error_domain=fakelibvirt.VIR_FROM_NODEDEV)
        conn.nodeDeviceLookupByName = lookup_by_name

        results = {}
        for inst_uuid in request['instances']:
            client = cyborg.get_client(ctx)
            result = results[inst_uuid] = {}
            try:
                arqs = client.get_arqs_for_instance(inst_uuid,
                                                    only_resolved=True)
                result['arqs'] = arqs
                result['arq_microversion'] = client._get_arq_microversion() \
                    if hasattr(client, '_get_arq_microversion') else None
                if hasattr(client, 'check_arqs_movable'):
                    # the series (0003): may these devices be live migrated?
                    try:
                        client.check_arqs_movable(arqs, live=True)
                        result['live_refusal'] = None
                    except exception.AcceleratorRequestNotMovable as e:
                        result['live_refusal'] = e.format_message()
                data = client._client.get_endpoint_data()
                result['endpoint_data'] = repr(data and (
                    data.url, data.min_microversion, data.max_microversion))
                del created[:]
                mdevs = drvr._allocate_cyborg_mdevs(arqs)
                result['mdevs'] = mdevs
                result['mdev_parents'] = []
                for xml in created[::2]:      # create, then define: one per mdev
                    node = vconfig.LibvirtConfigNodeDevice()
                    node.parse_str(xml)
                    result['mdev_parents'].append(node.parent)
                instance = objects.Instance(**self.test_instance)
                instance.uuid = inst_uuid
                image_meta = objects.ImageMeta.from_dict(self.test_image_meta)
                cfg = drvr._get_guest_config(
                    instance, [], image_meta, {'mapping': {}},
                    mdevs=mdevs, accel_info=arqs)
                result['xml'] = cfg.to_xml()
            except Exception as e:  # noqa: BLE001 - reported to the test
                result['error'] = '%s: %s' % (type(e).__name__, e)
        for move in request.get('moves', []):
            key = '%s>%s' % (move['source'], move['destination'])
            result = results[key] = {}
            try:
                self._live_migrate(ctx, drvr, created, move, result)
            except Exception as e:  # noqa: BLE001 - reported to the test
                result['error'] = '%s: %s' % (type(e).__name__, e)
        with open(os.environ['STEWARD_NOVA_OUT'], 'w') as f:
            f.write(jsonutils.dumps(results))

    def _guest_xml(self, drvr, inst_uuid, arqs, mdevs):
        instance = objects.Instance(**self.test_instance)
        instance.uuid = inst_uuid
        image_meta = objects.ImageMeta.from_dict(self.test_image_meta)
        return drvr._get_guest_config(
            instance, [], image_meta, {'mapping': {}}, mdevs=mdevs,
            accel_info=arqs).to_xml()

    def _live_migrate(self, ctx, drvr, created, move, result):
        client = cyborg.get_client(ctx)
        src = client.get_arqs_for_instance(move['source'], only_resolved=True)
        dst = client.get_arqs_for_instance(move['destination'],
                                           only_resolved=True)
        result['src_arqs'], result['dst_arqs'] = src, dst
        result['movable'] = {}
        for name, arqs in (('source', src), ('destination', dst)):
            try:
                client.check_arqs_movable(arqs, live=True)
                result['movable'][name] = None
            except exception.AcceleratorRequestNotMovable as e:
                result['movable'][name] = e.format_message()
        # The source host: the running guest, from the source set.
        result['src_xml'] = self._guest_xml(
            drvr, move['source'], src, drvr._allocate_cyborg_mdevs(src))
        # The destination host: pre_live_migration with the migrate data the
        # conductor and the source filled (shared storage, no volume, no
        # port), then the guest it builds from its own set.
        instance = objects.Instance(**self.test_instance)
        instance.uuid = move['source']
        data = objects.LibvirtLiveMigrateData(
            is_shared_block_storage=True, is_shared_instance_path=True,
            block_migration=False, is_volume_backed=False,
            graphics_listen_addr_vnc='127.0.0.1',
            graphics_listen_addr_spice='127.0.0.1',
            serial_listen_addr=None)
        data.src_accel_info = src
        data.dst_accel_info = dst
        del created[:]
        data = drvr.pre_live_migration(ctx, instance, None, [], None, data)
        result['dst_mdev_parents'] = []
        for xml in created[::2]:      # create, then define: one per mdev
            node = vconfig.LibvirtConfigNodeDevice()
            node.parse_str(xml)
            result['dst_mdev_parents'].append(node.parent)
        result['dst_xml'] = self._guest_xml(
            drvr, move['source'], dst,
            [a['attach_handle_uuid'] for a in dst
             if a['attach_handle_type'] == 'MDEV'])
        # The source host again: the domain XML the guest migrates with.
        result['migrating_xml'] = libvirt_migration.get_updated_guest_xml(
            instance, _SourceGuest(result['src_xml']), data,
            drvr._get_volume_config)

"""The base of the HTTP doubles of services Steward calls (Nova): keep-alive
HTTP/1.1, JSON answers with their length, and no request lines on stderr."""
import http.server
import json


class JsonHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def _send(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


def nova_server(server_uuid, host=None, status='ACTIVE', task_state=None, name='vm'):
    """The part of Nova's ``GET /servers/{uuid}`` body (admin) that Steward reads:
    where the server is and whether it is moving."""
    return {'id': server_uuid, 'name': name, 'status': status,
            'OS-EXT-SRV-ATTR:host': host, 'OS-EXT-SRV-ATTR:hypervisor_hostname': host,
            'OS-EXT-STS:task_state': task_state,
            'OS-EXT-STS:vm_state': 'resized' if status == 'VERIFY_RESIZE' else 'active'}

"""The instances this host booted: one JSON file per instance under
``[DEFAULT] state_path/compute/<name>.json``.

A record is written before the boot touches anything (created exclusively, so a
name is taken once) and updated before each step that leaves something behind
(allocation, ARQs, each mdev): whatever a crash interrupts, ``delete`` finds what
to undo. Writes go through a temporary file and a rename, so a record is never
half written.
"""
import datetime
import json
import os
import re

from steward.common import exception

NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$')
BUILDING, ACTIVE, ERROR = 'building', 'active', 'error'


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def check_name(name):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise exception.InstanceNameInvalid(name=name)
    return name


class Store:
    def __init__(self, state_path):
        self.dir = os.path.join(state_path, 'compute')

    def _path(self, name):
        return os.path.join(self.dir, check_name(name) + '.json')

    def create(self, record):
        """Store a new record; InstanceExists when the name is taken."""
        path = self._path(record['name'])
        os.makedirs(self.dir, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise exception.InstanceExists(name=record['name']) from None
        with os.fdopen(fd, 'w') as f:
            json.dump(record, f, indent=1, sort_keys=True)
        return record

    def save(self, record):
        record['updated_at'] = now()
        path = self._path(record['name'])
        tmp = f'{path}.{os.getpid()}.tmp'
        with open(tmp, 'w') as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return record

    def get(self, name):
        """The record of ``name`` (or of the instance with that UUID)."""
        try:
            with open(self._path(name)) as f:
                return json.load(f)
        except exception.InstanceNameInvalid:
            pass
        except FileNotFoundError:
            pass
        for record in self.list():
            if record.get('uuid') == name:
                return record
        raise exception.InstanceNotFound(name=name)

    def delete(self, name):
        try:
            os.unlink(self._path(name))
        except FileNotFoundError:
            pass

    def list(self):
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.endswith('.json'))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            try:
                with open(os.path.join(self.dir, n)) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                continue        # removed meanwhile, or not ours
        return out

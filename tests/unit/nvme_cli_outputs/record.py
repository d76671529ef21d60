"""Record what one nvme-cli binary prints for every command the nvme driver parses,
run over the simulated controllers of tests/nvme_sim (the binary's real output, its
exit code and stderr), into ``tests/unit/nvme_cli_outputs/<version>/``.

    .venv/bin/python -m tests.unit.nvme_cli_outputs.record BINARY --source 'TEXT'

``BINARY`` is any nvme-cli (a distribution's package, a build of a release tag);
``--source`` says where it came from, for the README. It builds nothing: how the
binary was had is the README's to say. Each case is ``<case>.stdout`` (what the
parsers read, byte for byte) plus its entry in ``cases.json`` (argv, exit code,
stderr); the simulator's paths are written as ``/dev/...``. test_nvme_cli_versions.py
checks every recorded case against what the scenario below put on the drive.
"""
import argparse
import json
import os
import re
import sys
import tempfile

from tests.nvme_sim import Simulation

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 2 ** 20
NSID_ALL = '0xffffffff'
# The presets are real models' Identify data; the extra SANICAP bits make 2.3 print
# the field as a negative number, the shape its parser must undo.
SANICAP_EXTRA = 0xa0000000


def scenario(sim, run):
    """Every case, in order: (name, argv) pairs run with ``run`` while the drives
    are in the state the comment before each names."""
    a = sim.add_controller(address='0000:0a:00.0', serial='RECSN0001',
                           preset='enterprise_crypto_block',
                           namespaces=[4 * MiB, 8 * MiB], capacity=16 * MiB,
                           sanitize_seconds=0.2)
    a.update(sanicap_extra=SANICAP_EXTRA)       # a preset sets SANICAP whole
    b = sim.add_controller(address='0000:0b:00.0', serial='RECSN0002',
                           preset='client_format', namespaces=[8 * MiB], block_size=4096)
    c = sim.add_controller(address='0000:0c:00.0', serial='RECSN0003',
                           preset='block_erase', namespaces=[4 * MiB], sanitize_seconds=0.2)

    run('version', ['version'])
    run('id-ctrl', ['id-ctrl', a.char_path, '-o', 'json'])
    run('id-ctrl-no-sanitize', ['id-ctrl', b.char_path, '-o', 'json'])
    run('id-ns', ['id-ns', a.char_path, '-n', '2', '-o', 'json'])
    run('id-ns-4k', ['id-ns', b.char_path, '-n', '1', '-o', 'json'])
    run('id-ns-all', ['id-ns', a.char_path, '-n', NSID_ALL, '-o', 'json'])
    run('list-ns', ['list-ns', a.char_path, '-o', 'json'])
    # namespace 2 detached: active list [1], allocated list [1, 2]
    run('detach-ns', ['detach-ns', a.char_path, '-n', '2', '-c', '0'])
    run('list-ns-active', ['list-ns', a.char_path, '-o', 'json'])
    run('list-ns-allocated', ['list-ns', a.char_path, '-o', 'json', '-a'])
    run('delete-ns', ['delete-ns', a.char_path, '-n', '2'])
    run('create-ns', ['create-ns', a.char_path, '-s', '4096', '-c', '4096', '-f', '0'])

    run('sanitize-log-never', ['sanitize-log', a.char_path, '-o', 'json'])
    # a crypto erase that hangs at 43 %: in progress, and a second sanitize refused
    a.inject_sanitize_hang(progress=0.43)
    run('sanitize', ['sanitize', a.char_path, '-a', '4'])
    run('sanitize-log-in-progress', ['sanitize-log', a.char_path, '-o', 'json'])
    run('sanitize-while-in-progress', ['sanitize', a.char_path, '-a', '2'])
    a.release_sanitize_hang()
    a.wait_sanitize()
    run('sanitize-log-success', ['sanitize-log', a.char_path, '-o', 'json'])
    # a block erase that fails
    c.inject_sanitize_failure()
    run('sanitize-block', ['sanitize', c.char_path, '-a', '2'])
    c.wait_sanitize()
    run('sanitize-log-failed', ['sanitize-log', c.char_path, '-o', 'json'])
    # no sanitize at all: Invalid Log Page (0x4109)
    run('sanitize-log-unsupported', ['sanitize-log', b.char_path, '-o', 'json'])

    run('smart-log-new', ['smart-log', a.char_path, '-o', 'json'])
    a.set_health(extra_warning=0x08)
    run('smart-log-read-only', ['smart-log', a.char_path, '-o', 'json'])
    a.set_health(extra_warning=0, available_spare=5)
    run('smart-log-spare-low', ['smart-log', a.char_path, '-o', 'json'])
    a.set_health(available_spare=100, temperature_k=300, percent_used=42,
                 media_errors=2 ** 40 + 5, error_log_entries=3)
    run('smart-log-counters', ['smart-log', a.char_path, '-o', 'json'])
    a.set_health(temperature_k=350, extra_warning=0x3c)      # every bit but 0
    run('smart-log-many-bits', ['smart-log', a.char_path, '-o', 'json'])

    # failures of a JSON command: where its status is told, and how
    a.inject(0x06, 0x4286, queue='admin')
    run('id-ctrl-access-denied', ['id-ctrl', a.char_path, '-o', 'json'])
    a.inject(0x06, 0x1d, queue='admin')
    run('id-ctrl-sanitize-in-progress', ['id-ctrl', a.char_path, '-o', 'json'])
    run('id-ctrl-no-device', ['id-ctrl', os.path.join(sim.dev_root, 'nvme9'), '-o', 'json'])


def record(binary, source, out_root=HERE, name=None):
    with tempfile.TemporaryDirectory(prefix='nvrec') as tmp, \
            Simulation(tmp, nvme_cli=binary) as sim:
        dev_root = re.escape(sim.dev_root)

        def normal(text):
            return re.sub(dev_root, '/dev', text)

        version = sim.nvme('version').stdout.split()[2]
        target = os.path.join(out_root, name or version)
        os.makedirs(target, exist_ok=True)
        cases = {}

        def run(name, argv):
            proc = sim.nvme(*argv)
            with open(os.path.join(target, f'{name}.stdout'), 'w') as f:
                f.write(normal(proc.stdout))
            cases[name] = {'argv': ' '.join(normal(a) for a in argv), 'rc': proc.returncode,
                           'stderr': normal(proc.stderr)}

        scenario(sim, run)
        with open(os.path.join(target, 'cases.json'), 'w') as f:
            # one case a line, so a re-recording's diff shows which cases changed
            f.write('{"version": %s,\n "source": %s,\n "cases": {\n' % (
                json.dumps(version), json.dumps(source)))
            f.write(',\n'.join(f'  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}'
                                for k, v in cases.items()))
            f.write('\n }\n}\n')
        return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('binary')
    parser.add_argument('--source', required=True,
                        help='where the binary came from (package, or tag and build)')
    parser.add_argument('--name', help='the folder, when not the version alone '
                                       '(two builds of one version)')
    args = parser.parse_args(argv)
    print(record(os.path.abspath(args.binary), args.source, name=args.name))


if __name__ == '__main__':
    sys.exit(main())

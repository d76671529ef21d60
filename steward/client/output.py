"""Printing API objects: ``-f table|json|yaml|value`` and ``-c COLUMN``.

* ``table`` (default): a rich table for people. Lists show a few columns per
  resource, ``show`` shows every field but ``links``. Tables take their natural
  width (as the openstack client's): nothing is wrapped or cut off.
* ``json`` / ``yaml``: the API's objects, every field (``-c`` narrows them).
* ``value``: bare values for shell scripts: one line per list row, fields
  separated by one space; for ``show``, one field per line. Lists and dicts
  inside a value are printed as one line of JSON, a missing value as ``None``.

Column names are the API's field names (``-c uuid -c state`` or
``-c uuid,state``), matched case-insensitively; an unknown one is a usage error.
"""
import json
import sys

from steward import client as cli

FORMATS = ('table', 'json', 'yaml', 'value')


def add_arguments(parser):
    group = parser.add_argument_group('output options')
    group.add_argument('-f', '--format', choices=FORMATS, default='table',
                       help='table (default), json, yaml or value')
    group.add_argument('-c', '--column', action='append', dest='columns',
                       metavar='COLUMN', default=[],
                       help='show this field (repeat it, or separate with commas); '
                            'json and yaml show every field unless -c is given')


# --- columns ----------------------------------------------------------------------
def _choose(requested, available):
    """The columns named by ``-c`` (each may be comma-separated), spelled as in
    ``available``."""
    by_lower = {name.lower(): name for name in available}
    chosen, unknown = [], []
    for item in requested:
        for name in (n.strip() for n in item.split(',')):
            if not name:
                continue
            match = by_lower.get(name.lower())
            if match is None:
                unknown.append(name)
            elif match not in chosen:
                chosen.append(match)
    if unknown:
        raise cli.UsageError(f'unknown column(s) {", ".join(unknown)}; choose from '
                             f'{", ".join(available)}')
    if not chosen:
        raise cli.UsageError('-c needs a column name')
    return chosen


def check_columns(args, known):
    """Fail on an unknown ``-c`` before a command changes anything (``create``
    prints the new object, whose fields are ``known``)."""
    if args.columns:
        _choose(args.columns, list(known))


def _available(objects, known):
    names = list(dict.fromkeys(known))
    for obj in objects:
        names.extend(k for k in obj if k not in names)
    return names


# --- cells ------------------------------------------------------------------------
def cell(value, one_line=False):
    """A value as text. Lists of objects take a line each (unless ``one_line``)."""
    if value is None:
        return 'None'
    if isinstance(value, bool):
        return 'True' if value else 'False'
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, list) and not one_line and \
            any(isinstance(v, (dict, list)) for v in value):
        return '\n'.join(json.dumps(v) for v in value)
    return json.dumps(value)


# --- writers ----------------------------------------------------------------------
def _dump(data, fmt, out):
    if fmt == 'json':
        out.write(json.dumps(data, indent=2) + '\n')
    else:
        import yaml
        out.write(yaml.safe_dump(data, default_flow_style=False, sort_keys=False,
                                 allow_unicode=True))


def _table(headers, rows, out):
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, highlight=False, emoji=False)
    terminal = console.is_terminal
    table = Table(box=box.SQUARE if terminal else box.ASCII2, safe_box=True,
                  header_style='bold' if terminal else None)
    for name in headers:
        table.add_column(name, no_wrap=True)
    for row in rows:
        # Text, not markup: values such as '[{"resources:FPGA": "1"}]' are data.
        table.add_row(*(Text(v) for v in row))
    # Natural width, as the openstack client prints: UUIDs are copied from these
    # tables, so nothing is wrapped or cut to fit a narrow terminal.
    width = Measurement.get(console, console.options.update(width=10 ** 5), table).maximum
    Console(file=out, highlight=False, emoji=False, width=width,
            force_terminal=terminal, color_system='auto' if terminal else None
            ).print(table)


def print_list(args, objects, columns, known=()):
    """Print API objects as a list. ``columns``: the table's default columns
    (those no object has are dropped unless there are no objects);
    ``known``: every field the resource may have, for checking ``-c``."""
    out = sys.stdout
    available = _available(objects, list(known) + list(columns))
    chosen = _choose(args.columns, available) if args.columns else None
    if args.format in ('json', 'yaml'):
        data = objects if chosen is None else \
            [{c: obj.get(c) for c in chosen} for obj in objects]
        return _dump(data, args.format, out)
    if chosen is None:
        chosen = [c for c in columns if not objects or any(c in o for o in objects)]
    rows = [[cell(obj.get(c), one_line=args.format == 'value') for c in chosen]
            for obj in objects]
    if args.format == 'value':
        for row in rows:
            out.write(' '.join(row) + '\n')
    else:
        _table(chosen, rows, out)


def print_object(args, obj, hidden=('links',)):
    """Print one API object: every field but ``hidden`` (unless asked for)."""
    out = sys.stdout
    if args.columns:
        chosen = _choose(args.columns, list(obj))
    elif args.format in ('json', 'yaml'):
        return _dump(obj, args.format, out)
    else:
        chosen = [k for k in obj if k not in hidden]
    if args.format in ('json', 'yaml'):
        return _dump({c: obj.get(c) for c in chosen}, args.format, out)
    if args.format == 'value':
        for c in chosen:
            out.write(cell(obj.get(c), one_line=True) + '\n')
    else:
        _table(['Field', 'Value'], [[c, cell(obj.get(c))] for c in chosen], out)

"""The expand-only rule (doc/contributor/schema-changes.md): every migration after
the previous release's schema (tests/fixtures/previous_release.py) only adds, so
that release's services keep reading and writing while the new schema is applied
under them in a rolling upgrade.

Two readings of the same rule, because each sees what the other cannot:

* the schemas themselves, on SQLite: the previous release's schema, then the
  tree's; every table, column and type of the first is still in the second, no
  column became NOT NULL, every column added to an old table can be left out of
  an INSERT, no old table got a new unique index;
* the operations of each later migration's ``upgrade()``, read with ``ast``: no
  drop, rename, type or NOT NULL change, nor unique index on an old table, and raw
  SQL (``op.execute``, which a schema comparison on SQLite may not see: a
  MariaDB-only statement) only where RAW_SQL says why it keeps old code working.

Each is also run on a copy of the migrations with a deliberately incompatible
migration added (a dropped column, a rename) to show it fails then.
"""
import ast
import pathlib
import shutil

from alembic import command
from alembic import config as alembic_config
from alembic import script as alembic_script
import pytest
import sqlalchemy as sa

from tests.fixtures import previous_release

ROOT = pathlib.Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / 'steward' / 'db' / 'migrations'
BASELINE = previous_release.SCHEMA

# Raw SQL in a migration after the baseline: revision -> why old code is unaffected.
# (0008, MariaDB's utf8mb4_bin collation, had the only entry until the previous
# release moved to it.)
RAW_SQL = {}
# Operations that are a contract step, never applied while old services run.
CONTRACT_OPS = {'drop_column', 'drop_table', 'drop_index', 'drop_constraint',
                'rename_table', 'create_unique_constraint', 'create_primary_key',
                'create_foreign_key', 'create_check_constraint'}


def _config(directory, connection):
    cfg = alembic_config.Config(str(directory / 'alembic.ini'))
    cfg.set_main_option('script_location', str(directory))
    cfg.attributes['connection'] = connection
    return cfg


def _migrate(directory, url, revision):
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(_config(directory, conn), revision)
    finally:
        engine.dispose()


def _schema(url):
    """{table: {'columns': {name: (type, nullable, has_default)}, 'unique':
    {frozenset(columns)}}} of the database at ``url``."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        out = {}
        for table in inspector.get_table_names():
            if table == 'alembic_version':
                continue
            columns = {c['name']: (str(c['type']), c['nullable'],
                                   c.get('default') is not None or bool(c.get('autoincrement')
                                                                        is True))
                       for c in inspector.get_columns(table)}
            unique = {frozenset(i['column_names']) for i in inspector.get_indexes(table)
                      if i.get('unique')}
            unique |= {frozenset(u['column_names'])
                       for u in inspector.get_unique_constraints(table)}
            out[table] = {'columns': columns, 'unique': unique}
        return out
    finally:
        engine.dispose()


def schema_violations(directory, tmp_path, baseline=BASELINE):
    """What the schema at head took away from, or now demands beyond, the schema
    at ``baseline``: [] when it only adds."""
    before_url = f'sqlite:///{tmp_path / "baseline.sqlite"}'
    after_url = f'sqlite:///{tmp_path / "head.sqlite"}'
    _migrate(directory, before_url, baseline)
    _migrate(directory, after_url, 'head')
    before, after = _schema(before_url), _schema(after_url)
    found = []
    for table, old in sorted(before.items()):
        if table not in after:
            found.append(f'table {table} removed or renamed')
            continue
        new = after[table]
        for name, (type_, nullable, _default) in sorted(old['columns'].items()):
            if name not in new['columns']:
                found.append(f'column {table}.{name} removed or renamed')
                continue
            new_type, new_nullable, _ = new['columns'][name]
            if new_type != type_:
                found.append(f'column {table}.{name}: type {type_} -> {new_type}')
            if nullable and not new_nullable:
                found.append(f'column {table}.{name} became NOT NULL')
        for name, (_type, nullable, default) in sorted(new['columns'].items()):
            if name not in old['columns'] and not nullable and not default:
                found.append(f'column {table}.{name} added NOT NULL without a server '
                             f'default: the previous release\'s INSERTs leave it out')
        for columns in sorted(new['unique'] - old['unique'], key=sorted):
            found.append(f'table {table}: new unique index on {sorted(columns)}: the '
                         f'previous release may write rows it refuses')
    return found


def _later_revisions(directory, baseline):
    script = alembic_script.ScriptDirectory.from_config(_config(directory, None))
    later = []
    for rev in script.walk_revisions():          # head first
        if rev.revision == baseline:
            return later
        later.append(rev)
    raise AssertionError(f'baseline {baseline} is not in {directory}')


def op_violations(directory, baseline=BASELINE, raw_sql=None):
    """The contract operations in the ``upgrade()`` of each migration after
    ``baseline``: [] when they only add."""
    raw_sql = RAW_SQL if raw_sql is None else raw_sql
    found = []
    for rev in _later_revisions(directory, baseline):
        tree = ast.parse(pathlib.Path(rev.path).read_text())
        upgrade = next(n for n in tree.body
                       if isinstance(n, ast.FunctionDef) and n.name == 'upgrade')
        for call in (n for n in ast.walk(upgrade) if isinstance(n, ast.Call)):
            if not isinstance(call.func, ast.Attribute):
                continue
            name = call.func.attr
            keywords = {k.arg: k.value for k in call.keywords}
            where = f'{rev.revision} line {call.lineno}'
            if name in CONTRACT_OPS:
                found.append(f'{where}: {name}')
            elif name == 'alter_column':
                changes = set(keywords) - {'existing_type', 'existing_nullable',
                                           'existing_server_default', 'schema',
                                           'existing_comment', 'comment'}
                relaxing = changes == {'nullable'} and isinstance(
                    keywords['nullable'], ast.Constant) and keywords['nullable'].value is True
                if changes and not relaxing:
                    found.append(f'{where}: alter_column {sorted(changes)}')
            elif name == 'create_index' and isinstance(keywords.get('unique'), ast.Constant) \
                    and keywords['unique'].value:
                found.append(f'{where}: create_index unique=True')
            elif name == 'add_column':
                column = next((a for a in call.args if isinstance(a, ast.Call)), None)
                kw = {k.arg: k.value for k in column.keywords} if column else {}
                not_null = isinstance(kw.get('nullable'), ast.Constant) and \
                    kw['nullable'].value is False
                if not_null and 'server_default' not in kw:
                    found.append(f'{where}: add_column NOT NULL without server_default')
            elif name == 'execute' and rev.revision not in raw_sql:
                found.append(f'{where}: raw SQL (op.execute): say in RAW_SQL why the '
                             f'previous release is unaffected')
    return found


# --- the rule on the tree -------------------------------------------------------------------
def test_the_baseline_is_a_revision_of_the_tree():
    assert _later_revisions(MIGRATIONS, BASELINE) is not None


def test_migrations_after_the_previous_release_only_add_to_its_schema(tmp_path):
    assert schema_violations(MIGRATIONS, tmp_path) == []


def test_migrations_after_the_previous_release_use_no_contract_operation():
    assert op_violations(MIGRATIONS) == []


def test_every_raw_sql_exception_names_a_later_revision():
    later = {rev.revision for rev in _later_revisions(MIGRATIONS, BASELINE)}
    assert set(RAW_SQL) <= later


# --- the checks fail on an incompatible migration ---------------------------------------------
def _with_migration(tmp_path, body):
    """A copy of the migrations with a revision 0999 after the head, ``body`` its
    upgrade()."""
    directory = tmp_path / 'migrations'
    shutil.copytree(MIGRATIONS, directory,
                    ignore=shutil.ignore_patterns('__pycache__'))
    head = alembic_script.ScriptDirectory.from_config(
        _config(MIGRATIONS, None)).get_current_head()
    (directory / 'versions' / '0999_test.py').write_text(
        '"""a test migration"""\nfrom alembic import op\nimport sqlalchemy as sa\n\n'
        f"revision = '0999'\ndown_revision = '{head}'\nbranch_labels = None\n"
        f'depends_on = None\n\n\ndef upgrade():\n{body}\n\n\ndef downgrade():\n    pass\n')
    return directory


INCOMPATIBLE = {
    'a dropped column': (
        "    with op.batch_alter_table('devices') as batch:\n"
        "        batch.drop_column('last_error')\n",
        'column devices.last_error removed or renamed', '0999 line 13: drop_column'),
    'a renamed column': (
        "    with op.batch_alter_table('devices') as batch:\n"
        "        batch.alter_column('vendor', new_column_name='vendor_id')\n",
        'column devices.vendor removed or renamed',
        "0999 line 13: alter_column ['new_column_name']"),
    'a NOT NULL column without a default': (
        "    op.add_column('devices', sa.Column('rack', sa.String(36), nullable=False))\n",
        'column devices.rack added NOT NULL without a server default',
        '0999 line 12: add_column NOT NULL without server_default'),
}


@pytest.mark.parametrize('case', sorted(INCOMPATIBLE))
def test_the_rule_fails_on_an_incompatible_migration(tmp_path, case):
    body, schema_finding, op_finding = INCOMPATIBLE[case]
    directory = _with_migration(tmp_path, body)
    found = schema_violations(directory, tmp_path)
    assert [f for f in found if f.startswith(schema_finding)] != [], found
    assert op_violations(directory) == [op_finding]


def test_the_rule_admits_what_only_adds(tmp_path):
    directory = _with_migration(
        tmp_path,
        "    op.create_table('racks', sa.Column('id', sa.Integer, primary_key=True),\n"
        "                    sa.Column('name', sa.String(255), nullable=False))\n"
        "    op.add_column('devices', sa.Column('rack_id', sa.Integer, nullable=True))\n"
        "    op.create_index('devices_rack_idx', 'devices', ['rack_id'])\n")
    assert schema_violations(directory, tmp_path) == []
    assert op_violations(directory) == []

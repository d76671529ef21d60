"""Documents generated from the code, so they cannot drift from it:
the state diagrams (from steward.common.states) and the configuration reference
(from the registered oslo.config options). A development tool, not installed with
Steward; tests/unit/test_docs.py fails when a generated file is out of date.

    .venv/bin/python tools/docs.py            # rewrite doc/states.md, doc/configuration.md
"""
import os

from steward.common import states
from steward.conf import keystoneauth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mermaid(transitions, start_states):
    lines = ['stateDiagram-v2']
    for state in start_states:
        lines.append(f'    [*] --> {state}')
    for t in transitions:
        if t.source is None:
            continue
        lines.append(f'    {t.source} --> {t.target}: {t.event}')
    return '\n'.join(lines)


def _table(transitions):
    rows = ['| from | event | to |', '|---|---|---|']
    for t in transitions:
        rows.append(f'| {t.source or "(unset, before the online migration)"} | '
                    f'`{t.event}` | {t.target} |')
    return '\n'.join(rows)



def states_markdown():
    arq_docs = _state_docs(states.ARQ_STATES)
    dev_docs = _state_docs(states.DEVICE_STATES)
    erase_docs = _state_docs(states.ERASE_STATES)
    return f'''# State machines

Generated from `steward/common/states.py` by `python tools/docs.py`; a test fails
when this file and the code disagree. Every change of an ARQ `state` or a device
`device_state` goes through `transitions.advance()`, which checks the edge exists,
writes it with a compare-and-swap UPDATE, records a device's change in its history
(`GET /v2/devices/{{uuid}}/history`, microversion 2.6) and its `last_error` (set
entering `error`, cleared at `available`) in the same transaction, and logs one
line once the transaction commits:
`<kind> <uuid>: <old> -> <new> (<event>) reason=… request_id=…`. Two edges taken
in one transaction with nothing between them that another could see are one
statement: a bind's `Initial -> BindStarted -> Bound` one UPDATE
(`advance(..., via=...)`), a delete's move to `Deleting` and the row's removal one
conditional DELETE (`transitions.remove()`), or for Nova's delete of an
instance's requests one `DELETE ... RETURNING` of them all, whose edges are
checked on the states they were removed in (`transitions.remove_all()`); each
edge is still checked and logged.

## Accelerator requests

```mermaid
{_mermaid(states.ARQ_TRANSITIONS, [states.ARQ_INITIAL])}
```

{arq_docs}

{_table(states.ARQ_TRANSITIONS)}

## Devices (`device_state`, spec 1)

Placement `reserved = total` for a single-accelerator device in every state but
`available`; see `steward/arqs/reservation.py` for the multi-accelerator rule.

```mermaid
{_mermaid(states.DEVICE_TRANSITIONS, [states.DEV_AVAILABLE])}
```

{dev_docs}

{_table(states.DEVICE_TRANSITIONS)}

A device created in `error` (discovery found its cleanup policy cannot be met)
has a history row `discovered` from the start, with its `last_error` as reason.

## Erase records (`status`, one cleanup attempt)

Created `running` when the agent starts a cleanup, or directly `failed` /
`interrupted` when no attempt could run; ended once, by `transitions.advance()` like
the other two (a result that comes after another ended it is refused).

```mermaid
{_mermaid(states.ERASE_TRANSITIONS, states.ERASE_INITIAL_STATES)}
```

{erase_docs}

{_table(states.ERASE_TRANSITIONS)}
'''


def _state_docs(values):
    """The docstring under each constant, read from the module source."""
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(states))
    docs = {}
    body = tree.body
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.Assign) and isinstance(nxt, ast.Expr)
                and isinstance(getattr(nxt, 'value', None), ast.Constant)
                and isinstance(nxt.value.value, str) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            value = getattr(states, node.targets[0].id, None)
            if isinstance(value, str):
                docs[value] = ' '.join(nxt.value.value.split())
    return '\n'.join(f'* **{v}**: {docs.get(v, "")}' for v in values)


def configuration_markdown():
    from steward.conf import middleware
    from steward.conf import opts as steward_opts
    out = ['# Configuration reference', '',
           'Generated from the registered options by `python tools/docs.py`; the',
           'same options, with their defaults, are in `etc/steward.conf.sample`.',
           'Keystone authentication options of `[placement]` and `[nova]`',
           '(auth_type, auth_url, ...) are keystoneauth\'s; see the sample.', '',
           'Options marked **mutable** take a new value without a restart: edit the',
           'file and send the service `SIGHUP` (`systemctl reload steward-<service>`,',
           'doc/deployment-systemd.md). So do oslo.log\'s `debug` and',
           '`default_log_levels` (and `log_config_append`, whose file is read again).',
           'A changed option that is not mutable keeps its value until the restart',
           '(the log warns "Ignoring change to immutable option").', '']
    library = {name: ("oslo.middleware's options, read by the API (Steward's "
                      "implementation of the middleware: doc/api.md, Hosting the API).")
               for name, _ in middleware.documented_opts()}
    for group, group_opts in steward_opts.list_opts() + middleware.documented_opts():
        name = group if isinstance(group, str) else getattr(group, 'name', None) or 'DEFAULT'
        out += [f'## [{name}]', '']
        help_text = library.get(group) if isinstance(group, str) else \
            getattr(group, 'help', None)
        if help_text:
            out += [' '.join(help_text.split()), '']
        out += ['| option | type | default | description |', '|---|---|---|---|']
        for opt in group_opts:
            if opt.name in _KEYSTONEAUTH_OPTS:
                continue
            default = opt.sample_default if opt.sample_default is not None else opt.default
            if isinstance(default, list):
                default = ', '.join(map(str, default))
            desc = ' '.join((opt.help or '').split()).replace('|', '\\|')
            if getattr(opt, 'deprecated_opts', None):
                desc += ' (also read as: ' + ', '.join(
                    f'[{d.group or name}] {d.name or opt.name}'
                    for d in opt.deprecated_opts) + ')'
            if opt.mutable:
                desc += ' **Mutable**: a reload (SIGHUP) applies it.'
            out.append(f'| `{opt.name}` | {type(opt).__name__.replace("Opt", "")} | '
                       f'`{default}` | {desc} |')
        out.append('')
    return '\n'.join(out)


_KEYSTONEAUTH_OPTS = {o.name for o in keystoneauth.opts()}


GENERATED = {
    'doc/states.md': states_markdown,
    'doc/configuration.md': configuration_markdown,
}


def main():
    for path, build in GENERATED.items():
        with open(os.path.join(ROOT, path), 'w') as f:
            f.write(build())
        print(f'wrote {path}')


if __name__ == '__main__':
    main()

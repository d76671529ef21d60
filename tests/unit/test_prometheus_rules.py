"""The Prometheus alerting rules (etc/prometheus/steward-rules.yml) and the Grafana
dashboard (etc/grafana/steward-dashboard.json) of doc/monitoring.md.

* promtool (Debian's ``prometheus``, from tools/system-packages.sh) checks the
  rules and runs their unit tests (etc/prometheus/steward-rules.test.yml), and
  checks every dashboard query, turned into a recording rule, parses.
* Every metric name a rule or a panel uses is one Steward really serves: ``steward
  serve`` is started and scraped, and so is a standalone agent's own endpoint
  (``metrics.serve_agent`` around a real ``AgentManager``); the label names and the
  enumerated label values (device states, cleanup and bind outcomes) they select
  on must exist too. A misspelt name would otherwise make an alert that can never
  fire and a panel that stays empty, with no error anywhere.
"""
import json
import os
import re
import shutil
import subprocess
import time

import httpx
from prometheus_client import parser
import prometheus_client.metrics
import pytest
import yaml

from tests.fixtures.stack import free_port, running_stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, 'etc', 'prometheus', 'steward-rules.yml')
RULE_TESTS = os.path.join(ROOT, 'etc', 'prometheus', 'steward-rules.test.yml')
DASHBOARD = os.path.join(ROOT, 'etc', 'grafana', 'steward-dashboard.json')

# Series Prometheus makes itself for every target, not served by Steward.
SYNTHESIZED = {'up': {'job', 'instance'}}
# Labels the scrape adds to every series.
TARGET_LABELS = {'job', 'instance'}
# The scrape jobs of doc/metrics.md, which the rules and doc/monitoring.md name.
JOBS = {'steward-api', 'steward-agent'}

# Grafana's variables, replaced by what a query could get, for promtool.
GRAFANA_VARS = {'$__rate_interval': '5m', '$__interval': '1m', '$__range': '6h',
                '$host': '.*'}

PROMQL_WORDS = {
    # operators and modifiers
    'and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left',
    'group_right', 'bool', 'offset', 'atan2', 'inf', 'nan',
    # aggregations, usable without parentheses right after them ("sum by (x) (...)")
    'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values',
    'bottomk', 'topk', 'quantile',
}


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f'{name} not found: it comes from Debian\'s "prometheus" package, '
                    f'installed by tools/system-packages.sh (apt-get install prometheus)')
    return path


# --- reading PromQL -----------------------------------------------------------------------
def _strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr):
    """Metric names in a PromQL expression: identifiers followed by a selector's
    ``{``, a range's ``[``, a space, ``)``, ``,`` or the end, other than functions,
    keywords, label lists and durations."""
    text = _strip_strings(expr)
    text = re.sub(r'\{[^}]*\}', '{}', text)
    text = re.sub(r'\[[^\]]*\]', '[]', text)
    text = re.sub(r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)',
                  ' ', text)
    text = re.sub(r'\$\{[^}]*\}|\$\w+', ' ', text)
    names = set()
    for match in re.finditer(r'(?<![\w:.$])([A-Za-z_:][\w:]*)(?=\s*(?:[{\[),]|\s|$))',
                             text):
        name = match.group(1)
        after = text[match.end():].lstrip()
        if name in PROMQL_WORDS or after.startswith('('):
            continue
        names.add(name)
    return names


def selectors(expr):
    """(metric, {label: (op, value)}) of every ``metric{...}`` selector."""
    found = []
    for match in re.finditer(r'(?<![\w:.$])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}', expr):
        matchers = {}
        for m in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', match.group(2)):
            matchers[m.group(1)] = (m.group(2), m.group(3))
        found.append((match.group(1), matchers))
    return found


def grouping_labels(expr):
    labels = set()
    for match in re.finditer(
            r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)',
            _strip_strings(expr)):
        labels.update(x.strip() for x in match.group(1).split(',') if x.strip())
    return labels


def test_metric_name_reader():
    # The reader itself, on the shapes the rules and panels use.
    assert metric_names('sum by (le, action) (rate(steward_cleanup_seconds_bucket'
                        '{outcome="succeeded", host=~"$host"}[6h]))') == \
        {'steward_cleanup_seconds_bucket'}
    assert metric_names('x_total{a="b"} unless x_total offset 1h or '
                        'increase(y_total[1h]) > 0') == {'x_total', 'y_total'}
    assert metric_names('time() - max by (host) (max_over_time(timestamp('
                        'changes(z[2m]) > 0)[6h:1m]))') == {'z'}
    assert metric_names('up{job="steward-agent"} == 0') == {'up'}
    assert metric_names('histogram_quantile(0.99, sum(rate(a_bucket[$__rate_interval]))'
                        ' by (le))') == {'a_bucket'}
    assert metric_names('steward_database_up') == {'steward_database_up'}
    assert metric_names('1e3 * on (instance) group_left (host) b') == {'b'}
    assert selectors('max(s{state=~"a|b", host!="x"})') == \
        [('s', {'state': ('=~', 'a|b'), 'host': ('!=', 'x')})]
    assert grouping_labels('sum by (host, type) (x) * on(instance) y') == \
        {'host', 'type', 'instance'}


# --- what the files hold ------------------------------------------------------------------
def _rules():
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [rule for group in doc['groups'] for rule in group['rules']]


def _alerts():
    return [r for r in _rules() if 'alert' in r]


def _dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def _panels(dash):
    for panel in dash['panels']:
        yield panel
        yield from panel.get('panels', ())


def _panel_exprs(dash):
    """(panel title, expression) of every query of the dashboard."""
    return [(p['title'], t['expr']) for p in _panels(dash) for t in p.get('targets', ())]


def _for_promtool(expr):
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert '$' not in expr, f'a Grafana variable GRAFANA_VARS does not know: {expr}'
    return expr


def _all_exprs():
    exprs = [(f'rule {r["alert"]}', r['expr']) for r in _alerts()]
    exprs += [(f'panel {title!r}', expr) for title, expr in _panel_exprs(_dashboard())]
    for var in _dashboard()['templating']['list']:
        query = var.get('query')
        query = query.get('query') if isinstance(query, dict) else query
        if var['type'] != 'query':
            continue
        match = re.fullmatch(r'label_values\((\w+),\s*(\w+)\)', query or '')
        assert match, f'variable {var["name"]}: a query this test cannot check: {query}'
        exprs.append((f'variable {var["name"]}',
                      f'sum by ({match.group(2)}) ({match.group(1)})'))
    return exprs


# --- promtool -------------------------------------------------------------------------
def test_promtool_checks_the_rules():
    out = subprocess.run([_tool('promtool'), 'check', 'rules', RULES],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f'SUCCESS: {len(_rules())} rules found' in out.stdout, out.stdout


def test_promtool_rule_unit_tests_pass():
    out = subprocess.run([_tool('promtool'), 'test', 'rules', RULE_TESTS],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'SUCCESS' in out.stdout, out.stdout


def test_every_alert_has_a_firing_and_a_quiet_case():
    with open(RULE_TESTS) as f:
        cases = [c for t in yaml.safe_load(f)['tests'] for c in t.get('alert_rule_test', ())]
    for alert in _alerts():
        mine = [c for c in cases if c['alertname'] == alert['alert']]
        assert any(c.get('exp_alerts') for c in mine), f'{alert["alert"]}: never fires'
        assert any(not c.get('exp_alerts') for c in mine), \
            f'{alert["alert"]}: no case where it must stay quiet'


def test_every_alert_says_what_to_do():
    with open(os.path.join(ROOT, 'doc', 'monitoring.md')) as f:
        headings = {line.lstrip('#').strip() for line in f if line.startswith('#')}
    for alert in _alerts():
        assert alert['labels']['severity'] in ('warning', 'critical')
        assert alert['annotations']['runbook'] == \
            f'doc/monitoring.md#{alert["alert"].lower()}'
        assert alert['alert'] in headings, f'doc/monitoring.md has no ### {alert["alert"]}'


def test_dashboard_queries_parse(tmp_path):
    exprs = _panel_exprs(_dashboard())
    rules = {'groups': [{'name': 'steward-dashboard', 'rules': [
        {'record': f'dashboard:query_{i}', 'expr': _for_promtool(expr)}
        for i, (_, expr) in enumerate(exprs)]}]}
    path = tmp_path / 'dashboard-queries.yml'
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([_tool('promtool'), 'check', 'rules', str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f'SUCCESS: {len(exprs)} rules found' in out.stdout, out.stdout


def test_the_last_report_panel_is_the_one_unit_tested():
    with open(RULE_TESTS) as f:
        tested = {c['expr'] for t in yaml.safe_load(f)['tests']
                  for c in t.get('promql_expr_test', ())}
    (expr,) = [e for title, e in _panel_exprs(_dashboard())
               if title == 'Time since last report']
    assert _for_promtool(expr) in tested


# --- the dashboard's shape ----------------------------------------------------------------
def test_dashboard_uses_a_prometheus_datasource_variable():
    dash = _dashboard()
    assert dash['schemaVersion'] == 39
    (ds,) = [v for v in dash['templating']['list'] if v['type'] == 'datasource']
    assert ds['query'] == 'prometheus'
    ref = {'type': 'prometheus', 'uid': '${%s}' % ds['name']}
    panels = [p for p in _panels(dash) if p['type'] != 'row']
    assert panels
    ids = [p['id'] for p in _panels(dash)]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel['datasource'] == ref, panel['title']
        assert panel['targets'], panel['title']
        for target in panel['targets']:
            assert target['datasource'] == ref, panel['title']
            assert metric_names(target['expr']), (panel['title'], target['expr'])


def test_dashboard_covers_what_operators_watch():
    used = set().union(*(metric_names(e) for _, e in _panel_exprs(_dashboard())))
    for name in ('steward_devices',                       # devices by state
                 'steward_cleanups_total',                # by outcome and action
                 'steward_cleanup_seconds_bucket',        # cleanup percentiles
                 'steward_arq_bind_seconds_bucket',       # bind percentiles
                 'steward_placement_errors_total',
                 'steward_discovery_last_cycle_seconds',  # agent cycle time
                 'steward_discovery_cycles_total'):       # last report
        assert name in used, name


# --- against what Steward serves ------------------------------------------------------------
def _exposed(text):
    """{sample name: label names} of a scrape. A family with no sample yet (a
    counter whose first label set comes with the first event) is there by its
    TYPE line, labels unknown (None)."""
    names = {}
    for line in text.splitlines():
        match = re.match(r'# TYPE (\S+) (\S+)', line)
        if match:
            name, kind = match.groups()
            suffixes = {'histogram': ('_bucket', '_sum', '_count'),
                        'summary': ('', '_sum', '_count'),
                        'counter': ('',) if name.endswith('_total') else ('_total',)
                        }.get(kind, ('',))
            for suffix in suffixes:
                names.setdefault(name + suffix, None)
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            names[sample.name] = (names.get(sample.name) or set()) | set(sample.labels)
    return names


def _declared_labels():
    """Label names of the families steward.metrics observes itself (they have
    no sample until their first event, so a scrape cannot show them)."""
    from steward import metrics
    labels = {}
    for obj in vars(metrics.Metrics()).values():
        if isinstance(obj, prometheus_client.metrics.MetricWrapperBase):
            names = set(obj._labelnames)
            if obj._type == 'histogram':
                labels[obj._name + '_bucket'] = names | {'le'}
                labels[obj._name + '_sum'] = labels[obj._name + '_count'] = names
            elif obj._type == 'counter':
                labels[obj._name + '_total'] = names
            else:
                labels[obj._name] = names
    # Families read from the database at each scrape that have no sample while
    # nothing is wrong (steward_device_health_condition and _fault).
    for family in metrics.DatabaseCollector._families():
        labels.setdefault(family.name, set(family._labelnames))
    return labels


@pytest.fixture(scope='module')
def served():
    """What ``steward serve`` (every family, doc/metrics.md) and a standalone
    agent's endpoint serve: (names served, names the agent serves, {name: label
    names})."""
    with running_stack(discovery_interval=1) as stack:
        # The deployables running_stack waits for are written before the agent
        # hears back from its report, which is when its cycle counts.
        deadline = time.monotonic() + 60
        while True:
            text = httpx.get(stack.metrics_url, timeout=30).text
            if 'steward_discovery_last_cycle_seconds{' in text:
                break
            assert time.monotonic() < deadline, 'no discovery cycle in 60 s:\n' + text
            time.sleep(0.2)
        serve = _exposed(text)

    from steward import metrics
    from steward.agent.manager import AgentManager
    from steward.conf import CONF
    from steward.drivers.fake import FakeDriver
    agent = AgentManager(CONF, None, host='rules-host',
                         drivers=[FakeDriver(CONF, 'rules-host')])
    server = metrics.serve_agent(agent, f'127.0.0.1:{free_port()}')
    try:
        agent_only = _exposed(httpx.get(server.url, timeout=30).text)
    finally:
        server.stop()

    labels = _declared_labels()
    for names in (serve, agent_only):
        for name, seen in names.items():
            if seen is not None:
                labels[name] = labels.get(name, set()) | seen
    unknown = (set(serve) | set(agent_only)) - set(labels)
    assert not unknown, f'served with no sample and no declared labels: {unknown}'
    labels.update(SYNTHESIZED)
    return set(serve), set(agent_only), labels


def test_the_scrapes_hold_what_doc_metrics_lists(served):
    serve, agent_only, _ = served
    # The reference lists the checks below compare with: if the scrapes came back
    # empty or partial, every name would look unknown for the wrong reason.
    for name in ('steward_devices', 'steward_accelerator_requests',
                 'steward_database_up', 'steward_placement_requests_total',
                 'steward_placement_errors_total', 'steward_discovery_cycles_total',
                 'steward_discovery_last_cycle_seconds', 'steward_arq_bind_seconds_bucket',
                 'steward_cleanup_seconds_bucket', 'steward_cleanups_total',
                 'process_cpu_seconds_total'):
        assert name in serve, name
    assert {'steward_discovery_cycles_total', 'steward_discovery_last_cycle_seconds',
            'process_cpu_seconds_total'} <= agent_only
    assert 'steward_devices' not in agent_only


def test_rules_and_panels_use_only_served_metrics(served):
    serve, agent_only, _ = served
    known = set(SYNTHESIZED) | agent_only | serve
    unknown = [(where, name) for where, expr in _all_exprs()
               for name in metric_names(expr) if name not in known]
    assert not unknown, f'metrics Steward does not serve: {unknown}'


def test_agent_queries_are_served_by_the_agent_endpoint(served):
    # In a multi-host deployment discovery comes from the agents' own endpoints
    # (job steward-agent), not from the API.
    _, agent_only, _ = served
    for where, expr in _all_exprs():
        names = metric_names(expr)
        if 'steward-agent' in expr or any(n.startswith('steward_discovery_') for n in names):
            missing = names - agent_only - set(SYNTHESIZED)
            assert not missing, f'{where}: not served by a standalone agent: {missing}'


def test_rules_and_panels_select_on_labels_that_exist(served):
    from steward import metrics
    from steward.common import states
    from steward.drivers.nvme import policy as nvme_policy
    _, _, labels_of = served
    values_of = {
        ('steward_devices', 'state'): set(states.DEVICE_STATES) | {'unset'},
        ('steward_accelerator_requests', 'state'): set(states.ARQ_STORED_STATES),
        ('steward_cleanups_total', 'outcome'): set(metrics.CLEANUP_OUTCOMES),
        ('steward_cleanups_total', 'action'): set(nvme_policy.ACTIONS),
        ('steward_placement_requests_total', 'kind'): {'read', 'write'},
        ('steward_device_health_condition', 'severity'): {'warning', 'unhealthy'},
        ('steward_device_health', 'health'): {'ok', 'warning', 'unhealthy', 'unknown'},
        ('up', 'job'): JOBS,
    }
    for suffix in ('_bucket', '_sum', '_count'):
        values_of['steward_cleanup_seconds' + suffix, 'outcome'] = \
            set(metrics.CLEANUP_OUTCOMES)
        values_of['steward_cleanup_seconds' + suffix, 'action'] = set(nvme_policy.ACTIONS)
        values_of['steward_arq_bind_seconds' + suffix, 'outcome'] = \
            set(metrics.BIND_OUTCOMES)
    problems = []
    for where, expr in _all_exprs():
        for name, matchers in selectors(expr):
            have = labels_of.get(name, set()) | TARGET_LABELS
            for label, (op, value) in matchers.items():
                if label not in have:
                    problems.append(f'{where}: {name} has no label {label!r}')
                    continue
                allowed = values_of.get((name, label))
                if label == 'job':
                    allowed = JOBS
                # Plain values and alternations of them; a real regex (".*" for
                # Grafana's "All") is not checked.
                if allowed is not None and re.fullmatch(r'[\w-]+(\|[\w-]+)*', value):
                    for v in value.split('|'):
                        if v not in allowed:
                            problems.append(f'{where}: {name}{{{label}{op}"{v}"}} '
                                            f'never exists ({sorted(allowed)})')
        group_by = grouping_labels(expr)
        have = set(TARGET_LABELS).union(*(labels_of.get(n, set())
                                          for n in metric_names(expr)))
        for label in group_by - have:
            problems.append(f'{where}: groups by {label!r}, which none of its '
                            f'metrics has')
    assert not problems, '\n'.join(problems)


def test_a_misspelt_metric_would_be_caught(served):
    # The check above can fail: names one letter off are not served.
    serve, agent_only, _ = served
    known = set(SYNTHESIZED) | agent_only | serve
    for wrong in ('steward_device', 'steward_cleanups', 'steward_cleanup_seconds',
                  'steward_placement_errors', 'steward_discovery_cycles'):
        assert not metric_names(f'rate({wrong}[5m])') <= known, wrong


def test_monitoring_page_links_resolve():
    from tests.unit.test_systemd_units import links_resolve
    assert not links_resolve('monitoring.md')

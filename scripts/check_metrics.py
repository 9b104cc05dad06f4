#!/usr/bin/env python3
"""Checks that the Grafana dashboard and the Prometheus alert rules only use metrics
that the Strand services really expose.

    check_metrics.py --dashboard D.json --rules R.yaml METRICS_FILE...
    check_metrics.py --self-test

METRICS_FILE: /metrics answers (Prometheus text format 0.0.4) captured from running
services (the integration test test_metrics_exposed does this after a workload).

Every PromQL expression of the dashboard (panel targets' `expr`, templating queries)
and every rule's `expr` is scanned for metric names: string literals, label matchers
`{...}`, range/subquery brackets `[...]`, `by/without/on/ignoring/group_*(...)` label
lists, Grafana variables (`$x`, `${x}`, `[$__rate_interval]`), function names,
keywords and numbers are removed. A name ending in `_bucket`, `_sum` or `_count`
is accepted when its stem is a histogram (or summary) family that is exposed; any
other name must be an exposed counter, gauge or untyped family. So `rate(x_bucket[5m])`
on a counter `x`, or a bare histogram family name, are errors too. Names that
Prometheus makes itself (ALLOWED_SYNTHETIC) are accepted without being exposed.
A label matcher written on a metric (`x{stage="delivery"}`) must name a label that
metric carries at run time, or a target label Prometheus attaches (TARGET_LABELS).
Exit status: 0 all found, 1 something missing, 2 bad input.
"""
import argparse
import json
import re
import sys

ALLOWED_SYNTHETIC = {"up"}  # made by Prometheus for every scrape target
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "atan2", "le",
}
SUFFIXES = ("_bucket", "_sum", "_count")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def strip_strings(expr):
    """Removes "..." '...' `...` literals (with escapes)."""
    return re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)


def metric_names(expr):
    """The metric names an expression refers to, as a set."""
    e = strip_strings(expr)
    e = re.sub(r"#[^\n]*", " ", e)  # comments
    e = re.sub(r"\{[^{}]*\}", " ", e)  # label matchers (strings already gone)
    e = re.sub(r"\[[^\[\]]*\]", " ", e)  # ranges, subqueries, [$__interval]
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", e)
    e = re.sub(r"\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*", " ", e)  # Grafana variables
    e = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b|\b0x[0-9a-fA-F]+\b", " ", e)  # numbers
    e = re.sub(r"\b\d+(ms|s|m|h|d|w|y)\b", " ", e)  # durations (offset 5m)
    names = set()
    for m in IDENT.finditer(e):
        name = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):  # a function or an aggregation
            continue
        if name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def grafana_exprs(node, out):
    """Collects PromQL from a dashboard: targets' expr and templating queries."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                out.append(v)
            elif k == "query" and isinstance(v, dict) and isinstance(v.get("query"), str):
                out.append(templating_promql(v["query"]))
            elif k in ("query", "definition") and isinstance(v, str) and "(" in v:
                out.append(templating_promql(v))
            else:
                grafana_exprs(v, out)
    elif isinstance(node, list):
        for v in node:
            grafana_exprs(v, out)
    return out


def templating_promql(q):
    """label_values(metric{...}, label) -> metric{...}; query_result(x) -> x."""
    m = re.match(r"\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$", q, re.S)
    if m:
        return m.group(1)
    m = re.match(r"\s*(?:query_result|metrics)\((.*)\)\s*$", q, re.S)
    return m.group(1) if m else q


def rule_exprs(path):
    try:
        import yaml
    except ImportError:
        sys.exit("check_metrics: PyYAML is needed (Debian: python3-yaml)")
    with open(path) as f:
        doc = yaml.safe_load(f)
    out = []
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list) or not groups:
        raise ValueError(f"{path}: no `groups` list")
    for g in groups:
        for r in g.get("rules") or []:
            name = r.get("alert") or r.get("record")
            if not name or not isinstance(r.get("expr"), str):
                raise ValueError(f"{path}: rule {r!r} needs alert/record and expr")
            if "alert" in r:
                if "severity" not in (r.get("labels") or {}):
                    raise ValueError(f"{path}: alert {name} has no severity label")
                if "summary" not in (r.get("annotations") or {}):
                    raise ValueError(f"{path}: alert {name} has no summary annotation")
            out.append((name, r["expr"]))
    return out


TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint",
                 "node"}  # attached by Prometheus / Kubernetes service discovery


def exposed_labels(texts):
    """{sample name: set of label names} from Prometheus text."""
    out = {}
    for text in texts:
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?", line)
            if m:
                names = re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", m.group(2) or "")
                out.setdefault(m.group(1), set()).update(names)
    return out


def selector_labels(expr):
    """[(metric, label)] for every label matcher written on a metric name."""
    e = strip_strings(expr)
    pairs = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}", e):
        for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2)):
            pairs.append((m.group(1), label))
    return pairs


def exposed_families(texts):
    """{family: type} from Prometheus text, plus the set of sample names."""
    families, samples = {}, set()
    for text in texts:
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                parts = line.split()
                if len(parts) >= 4:
                    families[parts[2]] = parts[3]
            elif line and not line.startswith("#"):
                m = IDENT.match(line)
                if m:
                    samples.add(m.group(0))
    for s in samples:  # untyped series without a TYPE line
        if s not in families and not any(
                s.endswith(x) and s[: -len(x)] in families for x in SUFFIXES):
            families[s] = "untyped"
    return families, samples


def resolve(name, families):
    """None if `name` is exposed, else why not."""
    if name in ALLOWED_SYNTHETIC:
        return None
    for suffix in SUFFIXES:
        stem = name[: -len(suffix)]
        if name.endswith(suffix) and stem in families:
            if families[stem] in ("histogram", "summary"):
                if suffix == "_bucket" and families[stem] == "summary":
                    return f"{stem} is a summary: it has no _bucket series"
                return None
            return f"{stem} is a {families[stem]}, not a histogram: no {name} series"
    kind = families.get(name)
    if kind is None:
        return "not exposed by any service"
    if kind in ("histogram", "summary"):
        return f"{name} is a {kind}: use {name}_bucket, _sum or _count"
    return None


def self_test():
    cases = {
        'sum by (le, job) (rate(a_seconds_bucket{x="y{z}",q=~"$v"}[$__rate_interval]))':
            {"a_seconds_bucket"},
        "histogram_quantile(0.99, sum without (pod) (rate(b_bucket[5m]))) > 1e-3": {"b_bucket"},
        'x / on(job) group_left(zone) y offset 5m and bool 2': {"x", "y"},
        'max_over_time(c_total[1h:5m]) or vector(0)': {"c_total"},
        'sum(rate(d_total{status=~"5.."}[5m])) / clamp_min(sum(rate(d_total[5m])), 1e-9)':
            {"d_total"},
        'up{job=~".*strand.*"} == 0': {"up"},
        'label_replace(e, "a", "$1", "b", "(.*)")': {"e"},
        "  # a comment\n f_gauge  ": {"f_gauge"},
    }
    ok = True
    for expr, want in cases.items():
        got = metric_names(expr)
        if got != want:
            print(f"self-test: {expr!r}: got {sorted(got)}, want {sorted(want)}")
            ok = False
    fam, _ = exposed_families(["# TYPE h histogram\nh_bucket{le=\"1\"} 0\n# TYPE c counter\n"
                               "c 1\nraw_gauge 3\n"])
    checks = {"h_bucket": None, "h_count": None, "h": "use", "c": None, "c_bucket": "not a",
              "raw_gauge": None, "nope": "not exposed", "up": None}
    for name, want in checks.items():
        got = resolve(name, fam)
        if (want is None) != (got is None) or (want and want not in got):
            print(f"self-test: resolve({name}) = {got!r}, want {want!r}")
            ok = False
    if selector_labels('rate(a_total{x="1",y=~"a=b"}[5m]) / b{z!="q"}') != [
            ("a_total", "x"), ("a_total", "y"), ("b", "z")]:
        print("self-test: selector_labels")
        ok = False
    if exposed_labels(['c{a="1",b="x=y"} 1\nc 2\n']) != {"c": {"a", "b"}}:
        print("self-test: exposed_labels")
        ok = False
    if templating_promql("label_values(m{a=\"b\"}, ns)") != 'm{a="b"}':
        print("self-test: templating_promql")
        ok = False
    print("check_metrics self-test: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", action="append", default=[])
    ap.add_argument("--rules", action="append", default=[])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("metrics", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.metrics or not (a.dashboard or a.rules):
        ap.error("need --dashboard and/or --rules, and at least one metrics file")
    texts = []
    for p in a.metrics:
        with open(p) as f:
            texts.append(f.read())
    families, _ = exposed_families(texts)
    if not families:
        print("check_metrics: the metrics files expose nothing", file=sys.stderr)
        return 2
    refs = []  # (where, expr)
    try:
        for p in a.dashboard:
            with open(p) as f:
                dash = json.load(f)
            exprs = grafana_exprs(dash, [])
            if not exprs:
                raise ValueError(f"{p}: no PromQL expressions found")
            refs += [(p, e) for e in exprs]
        for p in a.rules:
            refs += [(f"{p}: {name}", e) for name, e in rule_exprs(p)]
    except (OSError, ValueError) as e:
        print(f"check_metrics: {e}", file=sys.stderr)
        return 2
    labels = exposed_labels(texts)
    missing, used = 0, set()
    for where, expr in refs:
        for metric, label in selector_labels(expr):
            if metric in labels and label not in labels[metric] | TARGET_LABELS \
                    and label != "__name__":
                print(f"{where}: {metric} has no label {label!r} "
                      f"(it has {sorted(labels[metric]) or 'none'})\n    in {expr.strip()}")
                missing += 1
        names = metric_names(expr)
        if not names:
            print(f"{where}: no metric in expression {expr!r}")
            missing += 1
        for name in sorted(names):
            used.add(name)
            why = resolve(name, families)
            if why:
                print(f"{where}: {name}: {why}\n    in {expr.strip()}")
                missing += 1
    print(f"check_metrics: {len(refs)} expressions, {len(used)} metric names, "
          f"{len(families)} families exposed, {missing} problems")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The project's own rules for deploy/, on top of the schema validation that
scripts/check_deploy.sh does (which runs this with --rendered DIR --repo REPO):

- every rendered Deployment: readiness probe on /readyz and liveness probe on /healthz
  at the container's port, CPU and memory requests and limits, runAsNonRoot with a
  numeric non-zero user, no privilege escalation, read-only root, ALL capabilities
  dropped, a binary the image installs, and a PodDisruptionBudget selecting it;
- the executor has an autoscaling/v2 HPA on CPU (or, with the KEDA component, a
  ScaledObject instead and no HPA), and an autoscaled Deployment sets no replicas; Jobs run strand-admin migrate / create-topics;
- the KEDA ScaledObject (a CRD, no bundled schema) has the fields KEDA needs;
- Dockerfile: multi-stage, Debian slim runtime, numeric non-root USER, every binary
  the manifests run is installed by the build (an install(TARGETS) in CMake), and
  (on Debian 12) every package it installs exists;
- prod (and prod with KEDA): the API runs with authentication on (STRAND_AUTH_FILE
  names a file mounted from a Secret), and every pod whose PostgreSQL DSN asks for a
  verified server certificate (sslmode=verify-ca/verify-full) has the CA as a file
  mounted from a Secret or ConfigMap (sslrootcert= in the DSN or PGSSLROOTCERT, an
  absolute path; the image user's home is /nonexistent). A self-test runs these two
  rules on copies of the rendered prod with auth off and without the CA and fails if
  they do not catch it;
- the Grafana dashboard is JSON with unique panel ids and PromQL targets; the alert
  rules are a Prometheus rule file (the metric names themselves are checked against
  the running services by tests/integration/test_metrics_exposed.c).
Exit status 0 when all rules hold, 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import sys

import yaml

problems = []


def problem(where, msg):
    problems.append(f"{where}: {msg}")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def installed_binaries(repo):
    """Executables with an install(TARGETS ...) in some CMakeLists.txt."""
    names = set()
    for p in glob.glob(os.path.join(repo, "services", "*", "CMakeLists.txt")):
        with open(p) as f:
            for m in re.finditer(r"install\(TARGETS\s+([^)]*)\)", f.read()):
                names.update(m.group(1).split())
    return names


def check_container(where, c, binaries):
    cmd = c.get("command") or []
    if not cmd or not cmd[0].startswith("/usr/local/bin/"):
        problem(where, "command must run a binary from /usr/local/bin")
    elif os.path.basename(cmd[0]) not in binaries:
        problem(where, f"{cmd[0]} is not installed by the build (no install(TARGETS))")
    res = c.get("resources") or {}
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(kind) or {}):
                problem(where, f"resources.{kind}.{r} missing")
    sc = c.get("securityContext") or {}
    if sc.get("allowPrivilegeEscalation") is not False:
        problem(where, "allowPrivilegeEscalation must be false")
    if sc.get("readOnlyRootFilesystem") is not True:
        problem(where, "readOnlyRootFilesystem must be true")
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        problem(where, "capabilities must drop ALL")


def check_pod_security(where, spec):
    psc = spec.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        problem(where, "pod securityContext.runAsNonRoot must be true")
    uid = psc.get("runAsUser")
    if not isinstance(uid, int) or uid == 0:
        problem(where, "pod securityContext.runAsUser must be a non-zero number")


def check_probe(where, probe, path, ports):
    get = (probe or {}).get("httpGet") or {}
    if get.get("path") != path:
        problem(where, f"probe must GET {path}")
    if get.get("port") not in ports:
        problem(where, f"probe port {get.get('port')!r} is not a container port")


def check_rendered(name, docs, binaries, keda):
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    jobs = [d for d in docs if d["kind"] == "Job"]
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    want = {"strand-api", "strand-executor", "strand-scheduler", "strand-monitor"}
    have = {d["metadata"]["name"] for d in deployments}
    if have != want:
        problem(name, f"Deployments {sorted(have)}, want {sorted(want)}")
    services = {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    for d in deployments:
        dn = d["metadata"]["name"]
        where = f"{name}: Deployment {dn}"
        spec = d["spec"]["template"]["spec"]
        labels = d["spec"]["template"]["metadata"].get("labels") or {}
        check_pod_security(where, spec)
        for c in spec["containers"]:
            check_container(f"{where} container {c['name']}", c, binaries)
            ports = {p.get("name") for p in c.get("ports") or []} | {
                p.get("containerPort") for p in c.get("ports") or []}
            check_probe(f"{where} readinessProbe", c.get("readinessProbe"), "/readyz", ports)
            check_probe(f"{where} livenessProbe", c.get("livenessProbe"), "/healthz", ports)
        if dn not in services:
            problem(where, "no Service of the same name")
        selectors = [p["spec"]["selector"].get("matchLabels") or {} for p in pdbs]
        if not any(sel and all(labels.get(k) == v for k, v in sel.items())
                   for sel in selectors):
            problem(where, "no PodDisruptionBudget selecting its pods")
    scaled_names = {h["spec"]["scaleTargetRef"].get("name") for h in hpas} | {
        (so.get("spec") or {}).get("scaleTargetRef", {}).get("name") for so in scaled}
    for d in deployments:
        if d["metadata"]["name"] in scaled_names and "replicas" in d["spec"]:
            problem(f"{name}: Deployment {d['metadata']['name']}",
                    "is autoscaled, so it must not set spec.replicas (a re-apply would reset it)")
    if keda:
        if hpas:
            problem(name, "with the KEDA component there must be no HPA (KEDA owns one)")
        check_scaled_objects(name, scaled, have)
    else:
        ex = [h for h in hpas if h["spec"]["scaleTargetRef"].get("name") == "strand-executor"]
        if len(ex) != 1:
            problem(name, "want exactly one HPA for strand-executor")
        for h in ex:
            if h["apiVersion"] != "autoscaling/v2":
                problem(name, "the executor HPA must be autoscaling/v2")
            res = [m for m in h["spec"].get("metrics") or []
                   if m.get("type") == "Resource" and m["resource"].get("name") == "cpu"]
            if not res:
                problem(name, "the executor HPA must scale on CPU")
            if h["spec"].get("minReplicas", 1) > h["spec"]["maxReplicas"]:
                problem(name, "HPA minReplicas > maxReplicas")
    commands = {tuple(j["spec"]["template"]["spec"]["containers"][0].get("command") or [])
                for j in jobs}
    for sub in ("migrate", "create-topics"):
        if not any(c and c[0].endswith("/strand-admin") and c[-1] == sub for c in commands):
            problem(name, f"no Job runs strand-admin {sub}")
    for j in jobs:
        where = f"{name}: Job {j['metadata']['name']}"
        spec = j["spec"]["template"]["spec"]
        check_pod_security(where, spec)
        if spec.get("restartPolicy") not in ("Never", "OnFailure"):
            problem(where, "restartPolicy must be Never or OnFailure")
        for c in spec["containers"]:
            check_container(f"{where} container {c['name']}", c, binaries)


def check_scaled_objects(name, scaled, deployments):
    if len(scaled) != 1:
        problem(name, f"want one KEDA ScaledObject, found {len(scaled)}")
        return
    so = scaled[0]
    where = f"{name}: ScaledObject {so['metadata'].get('name')}"
    if so.get("apiVersion") != "keda.sh/v1alpha1":
        problem(where, "apiVersion must be keda.sh/v1alpha1")
    spec = so.get("spec") or {}
    allowed = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
               "cooldownPeriod", "idleReplicaCount", "triggers", "advanced", "fallback",
               "initialCooldownPeriod"}
    for k in spec:
        if k not in allowed:
            problem(where, f"unknown field spec.{k}")
    if (spec.get("scaleTargetRef") or {}).get("name") not in deployments:
        problem(where, "scaleTargetRef.name must be a Deployment")
    for k in ("minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod"):
        if k in spec and (not isinstance(spec[k], int) or spec[k] < 0):
            problem(where, f"spec.{k} must be a non-negative integer")
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
        problem(where, "minReplicaCount > maxReplicaCount")
    triggers = spec.get("triggers") or []
    kafka = [t for t in triggers if t.get("type") == "kafka"]
    if not kafka:
        problem(where, "needs a kafka trigger")
    for t in kafka:
        md = t.get("metadata") or {}
        for k in ("bootstrapServers", "consumerGroup", "topic", "lagThreshold"):
            if not isinstance(md.get(k), str) or not md.get(k):
                problem(where, f"kafka trigger metadata.{k} must be a non-empty string")
        if not str(md.get("lagThreshold", "")).isdigit():
            problem(where, "lagThreshold must be a number in a string")


def check_dockerfile(repo, binaries_run):
    path = os.path.join(repo, "Dockerfile")
    where = "Dockerfile"
    if not os.path.exists(path):
        problem(where, "missing")
        return
    lines, cont = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not cont and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                cont += line[:-1] + " "
                continue
            lines.append(cont + line)
            cont = ""
    known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
             "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK",
             "SHELL"}
    stages, user_after_last_from, last_from = [], None, None
    for n, line in enumerate(lines, 1):
        instr = line.split(None, 1)[0].upper()
        if instr not in known:
            problem(where, f"unknown instruction {instr!r} in: {line[:60]}")
        if instr == "FROM":
            stages.append(line)
            last_from, user_after_last_from = line, None
        elif instr == "USER":
            user_after_last_from = line.split(None, 1)[1].strip()
        elif instr == "COPY" and "--from=" in line:
            ref = re.search(r"--from=(\S+)", line).group(1)
            names = [re.search(r"\bAS\s+(\S+)", s, re.I) for s in stages[:-1]]
            if ref not in {m.group(1) for m in names if m} and not ref.isdigit():
                problem(where, f"COPY --from={ref}: no earlier stage of that name")
        if not stages:
            if instr not in ("ARG",):
                problem(where, f"{instr} before the first FROM")
    if len(stages) < 2:
        problem(where, "must be multi-stage (a build stage and a runtime stage)")
    if last_from and not re.search(r"\bdebian:[0-9a-z.-]*slim\b", last_from):
        problem(where, f"the runtime stage must be a Debian slim image: {last_from}")
    uid = (user_after_last_from or "").split(":")[0]
    if not uid.isdigit() or int(uid) == 0:
        problem(where, "the runtime stage needs a numeric non-root USER (runAsNonRoot)")
    text = "\n".join(lines)
    check_debian_packages(where, lines)
    if "scripts/build.sh release" not in text:
        problem(where, "must build with scripts/build.sh release, as CI does")
    for b in sorted(binaries_run):
        if b not in installed_binaries(repo):
            problem(where, f"{b} is run by the manifests but not installed by cmake --install")


def check_debian_packages(where, lines):
    """On a Debian 12 machine (like CI), every package an apt-get install line names
    must exist in the archive this machine knows (apt-cache show)."""
    try:
        with open("/etc/debian_version") as f:
            if not f.read().startswith("12"):
                return
    except OSError:
        return
    import shutil
    import subprocess
    if shutil.which("apt-cache") is None:
        return
    pkgs = [pkg for line in lines for m in re.finditer(r"apt-get install ([^&;]*)", line)
            for pkg in m.group(1).split() if not pkg.startswith("-")]

    def known(names):
        return subprocess.run(["apt-cache", "show", "--no-all-versions"] + names,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    if pkgs and not known(pkgs):  # one call; only on failure, find which one
        for pkg in pkgs:
            if not known([pkg]):
                problem(where, f"no Debian 12 package named {pkg!r}")


def check_dashboard(repo):
    path = os.path.join(repo, "deploy", "grafana", "strand-dashboard.json")
    try:
        with open(path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        problem(path, f"not readable JSON: {e}")
        return
    for k in ("title", "uid", "panels", "schemaVersion"):
        if k not in dash:
            problem(path, f"missing {k}")
    ids, exprs = set(), 0
    for p in dash.get("panels", []):
        if p.get("id") in ids:
            problem(path, f"duplicate panel id {p.get('id')}")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        targets = p.get("targets") or []
        if not targets:
            problem(path, f"panel {p.get('title')!r} has no targets")
        for t in targets:
            if not (t.get("expr") or "").strip():
                problem(path, f"panel {p.get('title')!r} has a target without expr")
            exprs += 1
            if t.get("expr", "").count("(") != t.get("expr", "").count(")"):
                problem(path, f"unbalanced parentheses in {t.get('expr')!r}")
    if exprs == 0:
        problem(path, "no PromQL targets")


def check_rules(repo):
    path = os.path.join(repo, "deploy", "prometheus", "strand-alerts.yaml")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        problem(path, f"not readable YAML: {e}")
        return
    names = set()
    for g in (doc or {}).get("groups") or []:
        for r in g.get("rules") or []:
            n = r.get("alert")
            if not n:
                problem(path, f"rule without alert name: {r}")
                continue
            if n in names:
                problem(path, f"duplicate alert {n}")
            names.add(n)
            expr = r.get("expr") or ""
            if not expr.strip() or expr.count("(") != expr.count(")"):
                problem(path, f"{n}: empty or unbalanced expr")
            if "for" in r and not re.fullmatch(r"\d+[smhdwy]", str(r["for"])):
                problem(path, f"{n}: bad `for` duration {r['for']!r}")
            if (r.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
                problem(path, f"{n}: severity must be critical, warning or info")
            if not (r.get("annotations") or {}).get("summary"):
                problem(path, f"{n}: needs a summary annotation")
    if not names:
        problem(path, "no alert rules")


def container_env(c, configmaps):
    """The container's environment: envFrom ConfigMaps first, then env values."""
    env = {}
    for src in c.get("envFrom") or []:
        ref = (src.get("configMapRef") or {}).get("name")
        if ref in configmaps:
            env.update(configmaps[ref])
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
    return env


def mounted_file(spec, c, path, kinds=("secret",)):
    """True if `path` lies under a volumeMount of a volume of one of `kinds`."""
    if not path or not path.startswith("/"):
        return False
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        v = volumes.get(m.get("name"), {})
        mount = m.get("mountPath", "").rstrip("/") + "/"
        if path.startswith(mount) and any(k in v for k in kinds):
            return True
    return False


def check_secure(name, docs):
    """prod's rules: auth on for the API, a mounted CA for verified PostgreSQL TLS.
    Returns the problems found (also recorded)."""
    found = []
    configmaps = {d["metadata"]["name"]: d.get("data") or {}
                  for d in docs if d["kind"] == "ConfigMap"}
    api_seen = False
    for d in docs:
        if d["kind"] not in ("Deployment", "Job"):
            continue
        spec = d["spec"]["template"]["spec"]
        where = f"{name}: {d['kind']}/{d['metadata']['name']}"
        for c in spec.get("containers") or []:
            env = container_env(c, configmaps)
            if d["kind"] == "Deployment" and d["metadata"]["name"] == "strand-api":
                api_seen = True
                auth = env.get("STRAND_AUTH_FILE", "")
                if not auth:
                    found.append(f"{where}: authentication is off (STRAND_AUTH_FILE is empty)")
                elif not mounted_file(spec, c, auth):
                    found.append(f"{where}: STRAND_AUTH_FILE {auth} is not a file mounted from a Secret")
            dsn = env.get("STRAND_PG_DSN", "")
            opts = dict(kv.split("=", 1) for kv in dsn.split() if "=" in kv)
            if opts.get("sslmode", "") in ("verify-ca", "verify-full"):
                root = opts.get("sslrootcert") or env.get("PGSSLROOTCERT", "")
                if not root:
                    found.append(f"{where}: sslmode={opts['sslmode']} without sslrootcert= or "
                                 "PGSSLROOTCERT (libpq would look in the home directory, /nonexistent)")
                elif not mounted_file(spec, c, root, ("secret", "configMap", "projected")):
                    found.append(f"{where}: the PostgreSQL CA {root} is not a file mounted from a "
                                 "Secret or ConfigMap")
    if not api_seen:
        found.append(f"{name}: no strand-api Deployment")
    problems.extend(found)
    return found


def self_test_secure(docs):
    """The rules must catch prod with auth off and prod without the CA."""
    import copy
    checks = []
    off = copy.deepcopy(docs)
    for d in off:
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "strand-api":
            for c in d["spec"]["template"]["spec"]["containers"]:
                c["env"] = [e for e in c.get("env") or [] if e["name"] != "STRAND_AUTH_FILE"]
    checks.append(("auth off", off, ("authentication is off",)))
    no_ca = copy.deepcopy(docs)
    for d in no_ca:
        if d["kind"] == "ConfigMap":
            data = d.get("data") or {}
            data.pop("PGSSLROOTCERT", None)
            if "STRAND_PG_DSN" in data:
                data["STRAND_PG_DSN"] = " ".join(kv for kv in data["STRAND_PG_DSN"].split()
                                                 if not kv.startswith("sslrootcert="))
    checks.append(("no CA", no_ca, ("without sslrootcert",)))
    unmounted = copy.deepcopy(docs)
    for d in unmounted:
        if d["kind"] in ("Deployment", "Job"):
            d["spec"]["template"]["spec"].pop("volumes", None)
    checks.append(("CA not mounted", unmounted, ("is not a file mounted", "without sslrootcert")))
    global problems
    for label, variant, want in checks:
        saved = problems
        problems = []
        found = check_secure(f"self-test ({label})", variant)
        problems = saved
        if not any(w in f for f in found for w in want):
            problem("check_deploy.py self-test", f"prod with {label} was not caught")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rendered", required=True, help="directory of rendered overlays")
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    binaries = installed_binaries(a.repo)
    run = set()
    for name, keda in (("base", False), ("dev", False), ("prod", False), ("prod-keda", True)):
        docs = load(os.path.join(a.rendered, f"{name}.yaml"))
        check_rendered(name, docs, binaries, keda)
        if name.startswith("prod"):
            check_secure(name, docs)
            if name == "prod":
                self_test_secure(docs)
        for d in docs:
            if d["kind"] in ("Deployment", "Job"):
                for c in d["spec"]["template"]["spec"]["containers"]:
                    if c.get("command"):
                        run.add(os.path.basename(c["command"][0]))
    check_dockerfile(a.repo, run)
    check_dashboard(a.repo)
    check_rules(a.repo)
    for p in problems:
        print("  " + p)
    print(f"check_deploy.py: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

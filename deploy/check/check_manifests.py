#!/usr/bin/python3
"""Checks the deployment properties ropeserve relies on in rendered YAML.

  check_manifests.py k8s --variant=cpu|gpu RENDERED.yaml   (kubectl kustomize output)
  check_manifests.py compose COMPOSE.yaml
  check_manifests.py self-test --variant=cpu|gpu RENDERED.yaml --compose COMPOSE.yaml

`k8s` asserts, on one rendered overlay: native gRPC startup/readiness/liveness
probes on the gRPC port; CPU and memory requests and limits; a non-root,
read-only, no-privilege-escalation, all-capabilities-dropped container; a
termination grace period longer than the server's --shutdown_grace_period; a
finite --max_connection_age; Prometheus scrape annotations on the metrics port;
a headless Service selecting the pods; an HPA and a PodDisruptionBudget on them;
a token-less ServiceAccount; and, for gpu, one nvidia.com/gpu with a GPU
toleration and node selector (for cpu, none).

`compose` asserts the single-machine compose file: the server with ports on
127.0.0.1, a read-only root, no capabilities, a stop grace period longer than
the drain, and a one-shot load run that waits for the server to be healthy.

`self-test` breaks each property in a copy of the documents and fails unless
the check catches every break, so a check that cannot fail is noticed.

Exit status: 0 all good; 1 a property does not hold (each printed on stderr);
2 bad usage or unreadable input. Needs python3-yaml.
"""

import argparse
import copy
import re
import sys

import yaml

GRPC_PORT = 50051
# Time the pod needs beyond the server's own drain: the process exit and the
# kubelet's bookkeeping.
GRACE_MARGIN_S = 5

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text):
    """Seconds of an absl duration ("25s", "1m30s", "500ms"); inf for "inf"."""
    text = text.strip()
    if text == "inf":
        return float("inf")
    if not text or _DURATION_PART.sub("", text) != "":
        raise ValueError(f"duration {text!r}: expected e.g. 25s, 2m, 1m30s or inf")
    return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))


def parse_quantity(text):
    """A Kubernetes quantity ("500m", "4", "2Gi") as a float in base units."""
    text = str(text)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    for suffix, scale in suffixes.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def flag_lines(text):
    """The --name=value lines of an absl flagfile, as a dict (last one wins)."""
    flags = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        flags[name.lstrip("-")] = value
    return flags


class Checker:
    """Collects failed properties; each message names the object and field."""

    def __init__(self):
        self.failures = []

    def expect(self, condition, message):
        if not condition:
            self.failures.append(message)
        return bool(condition)


def one(docs, kind, checker):
    found = [d for d in docs if d.get("kind") == kind]
    checker.expect(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0] if found else None


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def server_flags(deployment, container, configmaps, checker):
    """Flags ropeserve reads: the --flagfile files (from the mounted
    ConfigMap) in order, then flags given directly in args."""
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    volumes = deployment["spec"]["template"]["spec"].get("volumes", [])
    files = {}
    for volume in volumes:
        if "configMap" not in volume or volume["name"] not in mounts:
            continue
        name = volume["configMap"]["name"]
        cm = configmaps.get(name)
        if not checker.expect(cm is not None, f"volume {volume['name']}: ConfigMap {name} "
                              "is not in the rendered output"):
            continue
        for key, text in cm.get("data", {}).items():
            files[f"{mounts[volume['name']].rstrip('/')}/{key}"] = text
    flags = {}
    for arg in container.get("args", []):
        name, _, value = arg.partition("=")
        if name == "--flagfile":
            for path in value.split(","):
                if checker.expect(path in files, f"--flagfile {path}: no ConfigMap key is "
                                  "mounted there"):
                    flags.update(flag_lines(files[path]))
        else:
            flags[name.lstrip("-")] = value
    return flags


def check_k8s(docs, variant):
    c = Checker()
    deployment = one(docs, "Deployment", c)
    service = one(docs, "Service", c)
    hpa = one(docs, "HorizontalPodAutoscaler", c)
    pdb = one(docs, "PodDisruptionBudget", c)
    account = one(docs, "ServiceAccount", c)
    configmaps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    if deployment is None:
        return c.failures

    pod = deployment["spec"]["template"]
    pod_spec = pod["spec"]
    pod_labels = pod["metadata"].get("labels", {})
    containers = [x for x in pod_spec.get("containers", []) if x.get("name") == "ropeserve"]
    if not c.expect(len(containers) == 1, "Deployment: no container named ropeserve"):
        return c.failures
    container = containers[0]
    where = "Deployment ropeserve container"

    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    c.expect(ports.get("grpc") == GRPC_PORT, f"{where}: port grpc is {ports.get('grpc')}, "
             f"want {GRPC_PORT}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container.get(probe) or {}
        port = (spec.get("grpc") or {}).get("port")
        c.expect(port == GRPC_PORT,
                 f"{where}: {probe} is not a native gRPC probe on {GRPC_PORT} ({spec})")

    resources = container.get("resources", {})
    for section in ("requests", "limits"):
        for name in ("cpu", "memory"):
            c.expect(name in resources.get(section, {}),
                     f"{where}: resources.{section}.{name} is missing")
    for name in ("cpu", "memory"):
        req = resources.get("requests", {}).get(name)
        lim = resources.get("limits", {}).get(name)
        if req is not None and lim is not None:
            c.expect(parse_quantity(req) <= parse_quantity(lim),
                     f"{where}: resources.requests.{name} {req} > limits.{name} {lim}")

    sc = container.get("securityContext", {})
    pod_sc = pod_spec.get("securityContext", {})
    c.expect(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True,
             f"{where}: runAsNonRoot is not true")
    c.expect(sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0, f"{where}: runAsUser is 0")
    c.expect(sc.get("readOnlyRootFilesystem") is True,
             f"{where}: securityContext.readOnlyRootFilesystem is not true")
    c.expect(sc.get("allowPrivilegeEscalation") is False,
             f"{where}: securityContext.allowPrivilegeEscalation is not false")
    c.expect(sc.get("privileged", False) is False, f"{where}: securityContext.privileged")
    c.expect("ALL" in (sc.get("capabilities") or {}).get("drop", []),
             f"{where}: securityContext.capabilities.drop lacks ALL")
    c.expect(not (sc.get("capabilities") or {}).get("add"),
             f"{where}: securityContext.capabilities.add is not empty")

    flags = server_flags(deployment, container, configmaps, c)
    grace_flag = flags.get("shutdown_grace_period")
    period = pod_spec.get("terminationGracePeriodSeconds", 30)
    if c.expect(grace_flag is not None, f"{where}: no --shutdown_grace_period flag"):
        drain = parse_duration(grace_flag)
        c.expect(period >= drain + GRACE_MARGIN_S,
                 f"Deployment: terminationGracePeriodSeconds {period} is not at least "
                 f"{GRACE_MARGIN_S}s longer than --shutdown_grace_period={grace_flag}")
    age = flags.get("max_connection_age")
    if c.expect(age is not None, f"{where}: no --max_connection_age flag (clients would "
                "never re-resolve and find new replicas)"):
        c.expect(parse_duration(age) < float("inf"), f"{where}: --max_connection_age={age} "
                 "is infinite")
    listen = flags.get("listen", "")
    c.expect(listen.endswith(f":{GRPC_PORT}"), f"{where}: --listen={listen} is not port "
             f"{GRPC_PORT}")

    annotations = pod["metadata"].get("annotations", {})
    c.expect(annotations.get("prometheus.io/scrape") == "true",
             "Deployment pod: annotation prometheus.io/scrape is not \"true\"")
    metrics_port = flags.get("metrics_port")
    c.expect(metrics_port not in (None, "0"), f"{where}: metrics are off (--metrics_port)")
    c.expect(annotations.get("prometheus.io/port") == metrics_port,
             f"Deployment pod: prometheus.io/port {annotations.get('prometheus.io/port')} "
             f"is not --metrics_port={metrics_port}")
    c.expect(str(ports.get("metrics")) == str(metrics_port),
             f"{where}: port metrics {ports.get('metrics')} is not --metrics_port="
             f"{metrics_port}")

    if service is not None:
        c.expect(service["spec"].get("clusterIP") == "None",
                 "Service: clusterIP is not None (not headless: round_robin clients would "
                 "see one address)")
        c.expect(matches(service["spec"].get("selector"), pod_labels),
                 "Service: selector does not match the pod labels")
        grpc = [p for p in service["spec"].get("ports", []) if p.get("port") == GRPC_PORT]
        c.expect(len(grpc) == 1 and grpc[0].get("targetPort") in ("grpc", GRPC_PORT),
                 f"Service: no port {GRPC_PORT} to the gRPC container port")
    if hpa is not None:
        ref = hpa["spec"].get("scaleTargetRef", {})
        c.expect(ref.get("kind") == "Deployment" and
                 ref.get("name") == deployment["metadata"]["name"],
                 f"HorizontalPodAutoscaler: scaleTargetRef {ref} is not the Deployment")
        c.expect(hpa["spec"].get("minReplicas", 1) >= 2,
                 "HorizontalPodAutoscaler: minReplicas < 2 (a disruption would stop serving)")
        c.expect(bool(hpa["spec"].get("metrics")), "HorizontalPodAutoscaler: no metrics")
    if pdb is not None:
        c.expect(matches(pdb["spec"].get("selector", {}).get("matchLabels"), pod_labels),
                 "PodDisruptionBudget: selector does not match the pod labels")
        c.expect("maxUnavailable" in pdb["spec"] or "minAvailable" in pdb["spec"],
                 "PodDisruptionBudget: neither maxUnavailable nor minAvailable")
    if account is not None:
        c.expect(pod_spec.get("serviceAccountName") == account["metadata"]["name"],
                 "Deployment pod: serviceAccountName is not the ServiceAccount")
        c.expect(pod_spec.get("automountServiceAccountToken") is False or
                 account.get("automountServiceAccountToken") is False,
                 "ServiceAccount: its token is mounted (ropeserve calls no Kubernetes API)")

    gpus = resources.get("limits", {}).get("nvidia.com/gpu")
    tolerations = [t.get("key") for t in pod_spec.get("tolerations", [])]
    if variant == "gpu":
        c.expect(str(gpus) == "1", f"{where}: resources.limits nvidia.com/gpu is {gpus}, want 1")
        c.expect("nvidia.com/gpu" in tolerations, "Deployment pod: no nvidia.com/gpu toleration")
        c.expect(bool(pod_spec.get("nodeSelector")), "Deployment pod: no nodeSelector for GPU "
                 "nodes")
        c.expect(flags.get("backend") in ("cuda", "auto"),
                 f"{where}: --backend={flags.get('backend')} on a GPU pod")
    else:
        c.expect(gpus is None, f"{where}: a CPU pod asks for nvidia.com/gpu {gpus}")
        c.expect(flags.get("backend") == "cpu", f"{where}: --backend={flags.get('backend')} "
                 "on a CPU pod, want cpu")
        threads = flags.get("cpu_threads")
        cpu_limit = resources.get("limits", {}).get("cpu")
        if threads is not None and cpu_limit is not None:
            c.expect(0 < int(threads) <= parse_quantity(cpu_limit),
                     f"{where}: --cpu_threads={threads} is not within the CPU limit {cpu_limit}")
    return c.failures


def check_compose(doc):
    c = Checker()
    services = doc.get("services", {})
    server = services.get("ropeserve")
    load = services.get("ropeload")
    if not c.expect(server is not None, "compose: no service ropeserve"):
        return c.failures
    ports = server.get("ports", [])
    c.expect(bool(ports), "compose ropeserve: no ports published")
    for port in ports:
        c.expect(str(port).startswith("127.0.0.1:"),
                 f"compose ropeserve: port {port} is not bound to 127.0.0.1")
    c.expect(server.get("read_only") is True, "compose ropeserve: read_only is not true")
    c.expect("ALL" in server.get("cap_drop", []), "compose ropeserve: cap_drop lacks ALL")
    command = server.get("command", [])
    grace = [a.partition("=")[2] for a in command if a.startswith("--shutdown_grace_period=")]
    stop = server.get("stop_grace_period")
    if c.expect(grace and stop, "compose ropeserve: needs --shutdown_grace_period in command "
                "and stop_grace_period"):
        c.expect(parse_duration(stop) >= parse_duration(grace[-1]) + GRACE_MARGIN_S,
                 f"compose ropeserve: stop_grace_period {stop} is not at least "
                 f"{GRACE_MARGIN_S}s longer than --shutdown_grace_period={grace[-1]}")
    if c.expect(load is not None, "compose: no service ropeload"):
        depends = load.get("depends_on", {})
        c.expect(isinstance(depends, dict) and
                 (depends.get("ropeserve") or {}).get("condition") == "service_healthy",
                 "compose ropeload: does not wait for ropeserve to be service_healthy")
        c.expect(load.get("restart", "no") == "no", "compose ropeload: restarts (one-shot run)")
        c.expect(any("ropeserve:" in str(a) for a in load.get("command", [])),
                 "compose ropeload: no --target at the ropeserve service")
    return c.failures


def _container(docs):
    d = next(d for d in docs if d.get("kind") == "Deployment")
    return d, next(x for x in d["spec"]["template"]["spec"]["containers"]
                   if x["name"] == "ropeserve")


def _set_flag(docs, name, value):
    for d in docs:
        if d.get("kind") == "ConfigMap":
            for key, text in d.get("data", {}).items():
                lines = [ln for ln in text.splitlines()
                         if not ln.strip().startswith(f"--{name}=")]
                if value is not None and key == "server.flags":
                    lines.append(f"--{name}={value}")
                d["data"][key] = "\n".join(lines) + "\n"


def k8s_mutations(variant):
    """(what breaks, function that breaks it in place)."""
    def drop_probe(probe):
        return lambda docs: _container(docs)[1].pop(probe)

    def http_probe(docs):
        _container(docs)[1]["readinessProbe"] = {"httpGet": {"port": 9090, "path": "/metrics"}}

    def sc(key, value):
        return lambda docs: _container(docs)[1]["securityContext"].__setitem__(key, value)

    def no_limits(docs):
        _container(docs)[1]["resources"].pop("limits")

    def short_grace(docs):
        _container(docs)[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20

    def clusterip(docs):
        next(d for d in docs if d["kind"] == "Service")["spec"]["clusterIP"] = "10.0.0.1"

    def no_scrape(docs):
        _container(docs)[0]["spec"]["template"]["metadata"]["annotations"].pop(
            "prometheus.io/scrape")

    def no_caps_drop(docs):
        _container(docs)[1]["securityContext"]["capabilities"]["drop"] = []

    def pdb_selector(docs):
        next(d for d in docs if d["kind"] == "PodDisruptionBudget")["spec"]["selector"] = {
            "matchLabels": {"app": "other"}}

    def no_hpa(docs):
        docs.remove(next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler"))

    def gpu_limit(value):
        def mutate(docs):
            limits = _container(docs)[1]["resources"]["limits"]
            if value is None:
                limits.pop("nvidia.com/gpu", None)
            else:
                limits["nvidia.com/gpu"] = value
        return mutate

    def no_tolerations(docs):
        _container(docs)[0]["spec"]["template"]["spec"].pop("tolerations", None)

    mutations = [
        ("no startup probe", drop_probe("startupProbe")),
        ("no liveness probe", drop_probe("livenessProbe")),
        ("HTTP readiness probe", http_probe),
        ("writable root", sc("readOnlyRootFilesystem", False)),
        ("privilege escalation", sc("allowPrivilegeEscalation", True)),
        ("root user", sc("runAsNonRoot", False)),
        ("capabilities kept", no_caps_drop),
        ("no limits", no_limits),
        ("grace period shorter than the drain", short_grace),
        ("long drain", lambda docs: _set_flag(docs, "shutdown_grace_period", "1m")),
        ("no max connection age", lambda docs: _set_flag(docs, "max_connection_age", None)),
        ("infinite max connection age", lambda docs: _set_flag(docs, "max_connection_age",
                                                                "inf")),
        ("service with a cluster IP", clusterip),
        ("no scrape annotation", no_scrape),
        ("PDB on other pods", pdb_selector),
        ("no HPA", no_hpa),
    ]
    if variant == "gpu":
        mutations += [("no GPU limit", gpu_limit(None)), ("two GPUs", gpu_limit(2)),
                      ("no GPU toleration", no_tolerations)]
    else:
        mutations += [("a GPU on a CPU pod", gpu_limit(1))]
    return mutations


def compose_mutations():
    def server(doc):
        return doc["services"]["ropeserve"]

    def public_port(doc):
        server(doc)["ports"] = ["50051:50051"]

    def short_stop(doc):
        server(doc)["stop_grace_period"] = "10s"

    def no_wait(doc):
        doc["services"]["ropeload"]["depends_on"] = ["ropeserve"]

    return [
        ("port on every interface", public_port),
        ("writable root", lambda doc: server(doc).__setitem__("read_only", False)),
        ("stop grace shorter than the drain", short_stop),
        ("load run does not wait for health", no_wait),
        ("no load run", lambda doc: doc["services"].pop("ropeload")),
    ]


def self_test(docs, variant, compose):
    problems = []
    if check_k8s(docs, variant):
        problems.append(f"the unmodified {variant} manifests fail the check")
    for what, mutate in k8s_mutations(variant):
        broken = copy.deepcopy(docs)
        mutate(broken)
        if not check_k8s(broken, variant):
            problems.append(f"k8s check missed: {what}")
    if compose is not None:
        if check_compose(compose):
            problems.append("the unmodified compose file fails the check")
        for what, mutate in compose_mutations():
            broken = copy.deepcopy(compose)
            mutate(broken)
            if not check_compose(broken):
                problems.append(f"compose check missed: {what}")
    return problems


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["k8s", "compose", "self-test"])
    parser.add_argument("file", help="rendered manifests (k8s, self-test) or a compose file")
    parser.add_argument("--variant", choices=["cpu", "gpu"])
    parser.add_argument("--compose", help="self-test: also mutate this compose file")
    args = parser.parse_args(argv)
    if args.mode in ("k8s", "self-test") and args.variant is None:
        parser.error("--variant is required for k8s and self-test")
    try:
        docs = load_all(args.file)
        compose = load_all(args.compose)[0] if args.compose else None
    except (OSError, yaml.YAMLError) as e:
        print(f"check_manifests: {e}", file=sys.stderr)
        return 2

    if args.mode == "k8s":
        failures = check_k8s(docs, args.variant)
    elif args.mode == "compose":
        failures = check_compose(docs[0] if docs else {})
    else:
        failures = self_test(docs, args.variant, compose)
    for failure in failures:
        print(f"check_manifests {args.mode} {args.file}: {failure}", file=sys.stderr)
    if not failures:
        variant = f" {args.variant}" if args.variant else ""
        print(f"check_manifests {args.mode}{variant} {args.file}: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

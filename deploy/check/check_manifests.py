#!/usr/bin/python3
"""Checks the deployment properties ropeserve relies on in rendered YAML.

  check_manifests.py k8s --variant=VARIANT RENDERED.yaml   (kubectl kustomize output)
  check_manifests.py compose COMPOSE.yaml
  check_manifests.py sidecar SIDECAR.yaml           (deploy/k8s/examples/sidecar)
  check_manifests.py sidecar-self-test SIDECAR.yaml
  check_manifests.py self-test --variant=VARIANT RENDERED.yaml --compose COMPOSE.yaml

VARIANT is cpu or gpu, optionally with -tls (an overlay with
deploy/k8s/components/tls): checked as cpu or gpu, and TLS, mutual TLS and
token auth must be on.

`k8s` asserts, on one rendered overlay: the front proxy (a container named
proxy running HAProxy with deploy/proxy/haproxy.cfg) owns the gRPC port and
is the only way in: ropeserve listens only on a Unix socket in an in-memory
emptyDir mounted by the two containers alone, the proxy's ROPE_BACKEND is
that socket, and the proxy container is hardened like the server's; with
-tls, the proxy terminates TLS and checks client certificates (its
certificate and CA from a Secret mount) and connects to ropeserve with TLS;
native gRPC startup/readiness/liveness
probes on a port that serves plaintext health (the --health_listen port,
which must be a declared container port reachable on the pod IP and not the
gRPC or metrics port); every
--tls_*_file and --auth_token_file under the read-only mount of a Secret volume
(listed in its items, if any) that is not optional, not readable by other
users, and readable through fsGroup; no mount nested under a read-only one; no
cleartext appProtocol on a TLS Service port; CPU and memory requests and
limits; a non-root,
read-only, no-privilege-escalation, all-capabilities-dropped container; a
termination grace period longer than the server's --shutdown_grace_period; a
finite --max_connection_age and --max_connection_age_grace; Prometheus scrape annotations on the metrics port;
a headless Service selecting the pods; an HPA and a PodDisruptionBudget on them;
a token-less ServiceAccount; the memory bound (an explicit
--max_inflight_bytes with --table_cache_bytes + --max_inflight_bytes + the
server's margin within limits.memory, and room for a largest message each way
in its admitted calls' half,
docs/operations.md "Memory"); and, for gpu, one nvidia.com/gpu with a GPU
toleration and node selector (for cpu, none).

`compose` asserts the single-machine compose file: the proxy publishing gRPC
on 127.0.0.1 in front of the server's Unix socket (a volume the two share),
the server publishing no gRPC port, the load run going through the proxy,
ports on 127.0.0.1, a read-only root, no capabilities, a stop grace period longer than
the drain, and a one-shot load run that waits for the server to be healthy.

`sidecar` asserts the same-host example (a client pod with ropeserve as a
sidecar): ropeserve listens only on a Unix socket (plus, optionally, a
plaintext health port the kubelet probes with gRPC, declared as a container
port) whose directory is an in-memory emptyDir mounted in the client
container too; the socket mode grants nothing to other users; the same
in-memory emptyDir is /dev/shm in both containers (POSIX shared memory);
--shm_max_mapped_bytes is on and within that volume's sizeLimit; both
containers run as the one pod user; the grace period exceeds the drain.
`sidecar-self-test` breaks each of those.

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
PROXY = "proxy"  # the front proxy's container (and compose service)
VARIANTS = ("cpu", "gpu", "cpu-tls", "gpu-tls")
# Flags naming files that hold keys or secrets: they must come from Secrets.
SECRET_FILE_FLAGS = ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "auth_token_file")
# What a -tls variant turns on in ropeserve (mutual TLS is the proxy's).
TLS_VARIANT_FLAGS = ("tls_cert_file", "tls_key_file", "auth_token_file")
# The proxy's environment naming files from Secrets (-tls variants).
PROXY_SECRET_ENV = ("ROPE_PROXY_TLS_CERT", "ROPE_PROXY_CLIENT_CA")
# A Secret volume's file mode when defaultMode is not given.
SECRET_DEFAULT_MODE = 0o644
LOOPBACK_HOSTS = ("localhost", "[::1]", "::1")
# Time the pod needs beyond the server's own drain: the process exit and the
# kubelet's bookkeeping.
GRACE_MARGIN_S = 5
# ropeserve's defaults (server/main.cc, common/defaults.h) for flags a
# manifest leaves out, and the headroom it keeps beside the table cache and
# the in-flight budget (server/service/memory_limit.h, MemoryMargin).
DEFAULT_TABLE_CACHE_BYTES = 1 << 30
DEFAULT_MAX_MESSAGE_BYTES = 512 << 20


def memory_margin(limit_bytes):
    return max(256 << 20, limit_bytes // 8)

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


def split_variant(variant):
    """("cpu" or "gpu", whether TLS, mutual TLS and tokens must be on)."""
    base, _, extra = variant.partition("-")
    return base, extra == "tls"


def host_port(text):
    """(host, port) of "HOST:PORT"; port None when it is not a number."""
    host, _, port = text.rpartition(":")
    return host, int(port) if port.isdigit() else None


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


def plaintext_health_ports(flags, ports, needs_tls, c):
    """Checks the TLS and health flags; returns the ports on which the
    kubelet's gRPC probes (plaintext, no credentials) can reach
    grpc.health.v1: the gRPC port when it is plaintext, and the
    --health_listen port when it is well formed and declared."""
    where = "Deployment ropeserve container"
    tls = bool(flags.get("tls_cert_file"))
    if needs_tls:
        for name in TLS_VARIANT_FLAGS:
            c.expect(bool(flags.get(name)), f"{where}: no --{name} (a -tls variant serves "
                     "TLS and token auth)")
    if tls:
        c.expect(bool(flags.get("tls_key_file")), f"{where}: --tls_cert_file without "
                 "--tls_key_file")
    else:
        for name in ("tls_key_file", "tls_client_ca_file", "auth_token_file"):
            c.expect(not flags.get(name), f"{where}: --{name} needs --tls_cert_file")

    grpc_on_tcp = any(e.strip().endswith(f":{GRPC_PORT}")
                      for e in flags.get("listen", "").split(","))
    allowed = {GRPC_PORT} if grpc_on_tcp and not tls else set()
    health = flags.get("health_listen", "")
    if not health:
        c.expect(bool(allowed), f"{where}: no --health_listen: the kubelet's gRPC probes "
                 "(plaintext, no token, TCP) cannot reach grpc.health.v1")
        return allowed
    host, port = host_port(health)
    if not c.expect(port is not None, f"{where}: --health_listen={health} has no port"):
        return allowed
    c.expect(host not in LOOPBACK_HOSTS and not host.startswith("127."),
             f"{where}: --health_listen={health} is loopback; the kubelet probes the pod IP")
    c.expect(port != GRPC_PORT, f"{where}: --health_listen={health} is the gRPC port")
    c.expect(str(port) != flags.get("metrics_port"),
             f"{where}: --health_listen={health} is the metrics port")
    if c.expect(port in ports.values(), f"{where}: --health_listen port {port} is not a "
                f"declared container port ({ports})"):
        allowed.add(port)
    return allowed


def check_secret_files(pod_spec, container, flags, c):
    """Each key or secret file the flags name lies in a Secret volume mounted
    read-only; each such volume is required and readable only by its owner
    (root) and the pod's fsGroup, which the server (non-root) belongs to."""
    where = "Deployment ropeserve container"
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    secret_mounts = []
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        if not c.expect(volume is not None, f"{where}: volumeMount {mount['name']} "
                        "names no volume of the pod"):
            continue
        if "secret" not in volume:
            continue
        secret_mounts.append((mount["mountPath"].rstrip("/"), volume))
        secret = volume["secret"]
        what = f"Deployment pod: Secret volume {volume['name']}"
        c.expect(mount.get("readOnly") is True, f"{where}: Secret volume {volume['name']} "
                 "is not mounted readOnly")
        c.expect(secret.get("optional", False) is False, f"{what}: optional (the server "
                 "would start without its keys)")
        c.expect(pod_spec.get("securityContext", {}).get("fsGroup") is not None,
                 f"{what}: no pod securityContext.fsGroup: the files are root's and the "
                 "server (not root) cannot read them")
        modes = [secret.get("defaultMode", SECRET_DEFAULT_MODE)] + [
            i["mode"] for i in secret.get("items", []) if "mode" in i]
        for mode in modes:
            c.expect(mode & 0o007 == 0, f"{what}: file mode {mode:#o} lets every user "
                     "read it")
            c.expect(mode & 0o040 != 0, f"{what}: file mode {mode:#o} has no group read: "
                     "the server reads them through the pod's fsGroup")
    for name in SECRET_FILE_FLAGS:
        path = flags.get(name)
        if not path:
            continue
        found = [(m, v) for m, v in secret_mounts if path.startswith(m + "/")]
        if not c.expect(found, f"{where}: --{name}={path} is not under the mount of a "
                        "Secret volume"):
            continue
        mount_path, volume = found[0]
        items = volume["secret"].get("items")
        if items is not None:
            c.expect(path[len(mount_path) + 1:] in [i.get("path") for i in items],
                     f"{where}: --{name}={path}: Secret volume {volume['name']} has no "
                     "item with that path")


def check_mount_nesting(pod_spec, container, c):
    """No mount point inside a read-only or kubelet-written (ConfigMap,
    Secret) mount: the kubelet could not create the mount point there."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mounts = container.get("volumeMounts", [])
    for outer in mounts:
        volume = volumes.get(outer["name"], {})
        if not (outer.get("readOnly") or "configMap" in volume or "secret" in volume):
            continue
        prefix = outer["mountPath"].rstrip("/") + "/"
        for inner in mounts:
            c.expect(not inner["mountPath"].startswith(prefix),
                     f"Deployment ropeserve container: mount {inner['mountPath']} is inside "
                     f"the read-only mount {outer['mountPath']}")


def check_memory_bound(flags, memory_limit, where, c):
    """process memory ~= baseline + table cache + in-flight budget + margin
    must fit the container's memory limit (docs/operations.md "Memory")."""
    budget_flag = flags.get("max_inflight_bytes")
    if not c.expect(budget_flag is not None and budget_flag.isdigit() and int(budget_flag) > 0,
                    f"{where}: --max_inflight_bytes={budget_flag} is not an explicit positive "
                    "byte count (the memory bound must be checkable here)"):
        return
    if memory_limit is None:
        return  # reported with the resources
    limit = int(parse_quantity(memory_limit))
    budget = int(budget_flag)
    table = int(flags.get("table_cache_bytes", DEFAULT_TABLE_CACHE_BYTES))
    message = int(flags.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES))
    margin = memory_margin(limit)
    c.expect(table + budget + margin <= limit,
             f"{where}: --table_cache_bytes={table} + --max_inflight_bytes={budget} + margin "
             f"{margin} = {table + budget + margin} exceeds limits.memory {memory_limit} "
             f"({limit} bytes): the pod can be OOM-killed")
    # Half the budget is the admitted calls' (the other half the transport's).
    c.expect(budget // 2 >= 2 * message,
             f"{where}: half of --max_inflight_bytes={budget} is less than twice "
             f"--max_message_bytes={message}: a largest request and its reply could never run")


def check_hardened(pod_spec, container, where, c):
    """Non-root, read-only root, no privilege escalation, no capabilities."""
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


# ropeserve's per-client limits and their defaults (ropeserve --help).
PER_CLIENT_LIMITS = (("max_streams_per_client", "64"), ("max_inflight_bytes_per_client", "-1"))


def check_per_client_limits_behind_proxy(flags, where, c):
    """Behind the proxy without bearer tokens every client reaches ropeserve
    as one peer (the socket's uid): a per-client limit would bind all
    clients together, so it must be off (0)."""
    if flags.get("auth_token_file"):
        return
    for name, default in PER_CLIENT_LIMITS:
        value = flags.get(name, default)
        c.expect(value == "0", f"{where}: --{name}={value} without bearer tokens: every "
                 "client comes through the proxy as one peer, so the limit binds them all "
                 "together; set it to 0 (or tell clients apart by tokens)")


def check_front_proxy(pod_spec, server, flags, needs_tls, c):
    """The proxy container is the pod's gRPC listener and ropeserve is
    reachable only through it: a Unix socket in an in-memory emptyDir that
    the two containers alone mount. Returns the proxy's TLS certificate
    variable (None: plaintext)."""
    proxies = [x for x in pod_spec.get("containers", []) if x.get("name") == PROXY]
    if not c.expect(len(proxies) == 1, f"Deployment: no container named {PROXY} (the front "
                    "proxy every untrusted client must go through)"):
        return None
    proxy = proxies[0]
    where = f"Deployment {PROXY} container"
    command = proxy.get("command", []) + proxy.get("args", [])
    c.expect(bool(command) and command[0].endswith("haproxy") and "-f" in command,
             f"{where}: does not run haproxy -f CONFIG ({command})")
    ports = {p.get("name"): p.get("containerPort") for p in proxy.get("ports", [])}
    c.expect(ports.get("grpc") == GRPC_PORT, f"{where}: port grpc is {ports.get('grpc')}, "
             f"want {GRPC_PORT}")
    env = {e.get("name"): e.get("value") for e in proxy.get("env", [])}
    check_hardened(pod_spec, proxy, where, c)
    resources = proxy.get("resources", {})
    for section in ("requests", "limits"):
        for name in ("cpu", "memory"):
            c.expect(name in resources.get(section, {}),
                     f"{where}: resources.{section}.{name} is missing")

    entries = [e.strip() for e in flags.get("listen", "").split(",") if e.strip()]
    tcp = [e for e in entries if not e.startswith("unix://")]
    sockets = [e[len("unix://"):] for e in entries if e.startswith("unix://")]
    c.expect(not tcp, f"Deployment ropeserve container: --listen={flags.get('listen')} serves "
             "gRPC on TCP: every client must come through the proxy")
    if not c.expect(len(sockets) == 1, f"Deployment ropeserve container: --listen="
                    f"{flags.get('listen')} names no single Unix socket for the proxy"):
        return env.get("ROPE_PROXY_TLS_CERT")
    socket = sockets[0]
    c.expect(env.get("ROPE_BACKEND") == "unix@" + socket,
             f"{where}: ROPE_BACKEND is {env.get('ROPE_BACKEND')}, not ropeserve's socket "
             f"unix@{socket}")
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    directory = socket.rsplit("/", 1)[0]
    holders = []
    for container in pod_spec.get("containers", []):
        for mount in container.get("volumeMounts", []):
            if mount["mountPath"].rstrip("/") == directory:
                holders.append((container.get("name"), mount["name"]))
    names = sorted(h[0] for h in holders)
    c.expect(names == sorted(["ropeserve", PROXY]),
             f"Deployment: the socket directory {directory} is mounted by {names}, not by "
             f"ropeserve and {PROXY} alone")
    for _, volume_name in holders:
        volume = volumes.get(volume_name, {})
        c.expect((volume.get("emptyDir") or {}).get("medium") == "Memory",
                 f"Deployment pod: volume {volume_name} (the socket's directory) is not an "
                 "in-memory emptyDir")

    tls_cert = env.get("ROPE_PROXY_TLS_CERT")
    if needs_tls:
        for name in PROXY_SECRET_ENV:
            c.expect(bool(env.get(name)), f"{where}: no {name} (a -tls variant terminates "
                     "TLS and checks client certificates at the proxy)")
        c.expect(bool(env.get("ROPE_BACKEND_TLS")), f"{where}: no ROPE_BACKEND_TLS, but "
                 "ropeserve serves TLS (its bearer tokens need it)")
    c.expect(bool(env.get("ROPE_BACKEND_TLS")) == bool(flags.get("tls_cert_file")),
             f"{where}: ROPE_BACKEND_TLS={env.get('ROPE_BACKEND_TLS')} while ropeserve's "
             f"--tls_cert_file is {flags.get('tls_cert_file')!r}: the two must agree")
    secret_mounts = [m["mountPath"].rstrip("/") for m in proxy.get("volumeMounts", [])
                     if "secret" in volumes.get(m["name"], {}) and m.get("readOnly") is True]
    for name in PROXY_SECRET_ENV:
        path = env.get(name)
        if path:
            c.expect(any(path.startswith(m + "/") for m in secret_mounts),
                     f"{where}: {name}={path} is not under a read-only Secret mount")
    return tls_cert


def check_k8s(docs, variant):
    base_variant, needs_tls = split_variant(variant)
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

    check_hardened(pod_spec, container, where, c)

    flags = server_flags(deployment, container, configmaps, c)
    proxy_tls = check_front_proxy(pod_spec, container, flags, needs_tls, c)
    check_per_client_limits_behind_proxy(flags, where, c)
    health_ports = plaintext_health_ports(flags, ports, needs_tls, c)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container.get(probe) or {}
        port = (spec.get("grpc") or {}).get("port")
        c.expect(port in health_ports,
                 f"{where}: {probe} is not a native gRPC probe on a port serving plaintext "
                 f"health {sorted(health_ports)} ({spec})")
    check_secret_files(pod_spec, container, flags, c)
    check_mount_nesting(pod_spec, container, c)

    check_memory_bound(flags, resources.get("limits", {}).get("memory"), where, c)

    grace_flag = flags.get("shutdown_grace_period")
    teardown_flag = flags.get("teardown_timeout")
    period = pod_spec.get("terminationGracePeriodSeconds", 30)
    c.expect(teardown_flag is not None, f"{where}: no --teardown_timeout flag (the bound on "
             "gRPC's teardown after the drain must be explicit to fit the grace period)")
    if c.expect(grace_flag is not None, f"{where}: no --shutdown_grace_period flag"):
        # SIGTERM -> drain (at most the grace period) -> exit within the
        # teardown bound; the margin covers signal delivery and scheduling.
        drain = parse_duration(grace_flag)
        teardown = parse_duration(teardown_flag) if teardown_flag is not None else 0
        c.expect(period >= drain + teardown + GRACE_MARGIN_S,
                 f"Deployment: terminationGracePeriodSeconds {period} is not at least "
                 f"{GRACE_MARGIN_S}s longer than --shutdown_grace_period={grace_flag} plus "
                 f"--teardown_timeout={teardown_flag}")
    age = flags.get("max_connection_age")
    if c.expect(age is not None, f"{where}: no --max_connection_age flag (clients would "
                "never re-resolve and find new replicas)"):
        c.expect(parse_duration(age) < float("inf"), f"{where}: --max_connection_age={age} "
                 "is infinite")
    age_grace = flags.get("max_connection_age_grace")
    if c.expect(age_grace is not None, f"{where}: no --max_connection_age_grace flag (a slow "
                "sender could hold its connection's memory for ever)"):
        c.expect(parse_duration(age_grace) < float("inf"),
                 f"{where}: --max_connection_age_grace={age_grace} is infinite")

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
        if proxy_tls:
            c.expect(all(p.get("appProtocol") != "kubernetes.io/h2c" for p in grpc),
                     f"Service: port {GRPC_PORT} serves TLS but its appProtocol is "
                     "kubernetes.io/h2c (cleartext HTTP/2)")
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
    if base_variant == "gpu":
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
        c.expect(f":{GRPC_PORT}" not in str(port), f"compose ropeserve: publishes gRPC ({port}); "
                 f"clients must go through the {PROXY} service")
    c.expect(server.get("read_only") is True, "compose ropeserve: read_only is not true")
    c.expect("ALL" in server.get("cap_drop", []), "compose ropeserve: cap_drop lacks ALL")
    command = server.get("command", [])
    listen = [a.partition("=")[2] for a in command if a.startswith("--listen=")]
    socket = listen[-1][len("unix://"):] if listen and listen[-1].startswith("unix://") else None
    c.expect(socket is not None, f"compose ropeserve: --listen is {listen}, not one Unix socket "
             f"for the {PROXY} service")
    proxy = services.get(PROXY)
    if c.expect(proxy is not None, f"compose: no service {PROXY} (the front proxy)"):
        for port in proxy.get("ports", []):
            c.expect(str(port).startswith("127.0.0.1:"),
                     f"compose {PROXY}: port {port} is not bound to 127.0.0.1")
        c.expect(any(str(p).endswith(f":{GRPC_PORT}") for p in proxy.get("ports", [])),
                 f"compose {PROXY}: does not publish gRPC ({GRPC_PORT})")
        c.expect(proxy.get("read_only") is True, f"compose {PROXY}: read_only is not true")
        c.expect("ALL" in proxy.get("cap_drop", []), f"compose {PROXY}: cap_drop lacks ALL")
        env = proxy.get("environment", {})
        if socket is not None:
            c.expect(env.get("ROPE_BACKEND") == "unix@" + socket,
                     f"compose {PROXY}: ROPE_BACKEND is {env.get('ROPE_BACKEND')}, not "
                     f"unix@{socket}")
            directory = socket.rsplit("/", 1)[0]
            shared = [v.split(":")[0] for v in server.get("volumes", [])
                      if str(v).split(":")[1:2] == [directory]]
            c.expect(shared and any(str(v).split(":")[:2] == [shared[0], directory]
                                    for v in proxy.get("volumes", [])),
                     f"compose: the socket directory {directory} is not a volume of both "
                     f"ropeserve and {PROXY}")
    compose_flags = {}
    for a in command:
        if a.startswith("--") and "=" in a:
            compose_flags[a[2:].partition("=")[0]] = a.partition("=")[2]
    check_per_client_limits_behind_proxy(compose_flags, "compose ropeserve", c)
    grace = [a.partition("=")[2] for a in command if a.startswith("--shutdown_grace_period=")]
    teardown = [a.partition("=")[2] for a in command if a.startswith("--teardown_timeout=")]
    stop = server.get("stop_grace_period")
    if c.expect(grace and teardown and stop, "compose ropeserve: needs --shutdown_grace_period "
                "and --teardown_timeout in command, and stop_grace_period"):
        c.expect(parse_duration(stop) >=
                 parse_duration(grace[-1]) + parse_duration(teardown[-1]) + GRACE_MARGIN_S,
                 f"compose ropeserve: stop_grace_period {stop} is not at least "
                 f"{GRACE_MARGIN_S}s longer than --shutdown_grace_period={grace[-1]} plus "
                 f"--teardown_timeout={teardown[-1]}")
    if c.expect(load is not None, "compose: no service ropeload"):
        depends = load.get("depends_on", {})
        c.expect(isinstance(depends, dict) and
                 (depends.get("ropeserve") or {}).get("condition") == "service_healthy",
                 "compose ropeload: does not wait for ropeserve to be service_healthy")
        c.expect(load.get("restart", "no") == "no", "compose ropeload: restarts (one-shot run)")
        c.expect(any(f"{PROXY}:" in str(a) for a in load.get("command", [])),
                 f"compose ropeload: no --target at the {PROXY} service")
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


def _volume(docs, name):
    pod_spec = _container(docs)[0]["spec"]["template"]["spec"]
    return next(v for v in pod_spec["volumes"] if v["name"] == name)


def _mount(docs, volume_name):
    return next(m for m in _container(docs)[1]["volumeMounts"] if m["name"] == volume_name)


def _proxy(docs):
    d = next(d for d in docs if d.get("kind") == "Deployment")
    return next(x for x in d["spec"]["template"]["spec"]["containers"] if x["name"] == PROXY)


def _set_proxy_env(docs, name, value):
    proxy = _proxy(docs)
    proxy["env"] = [e for e in proxy.get("env", []) if e["name"] != name]
    if value is not None:
        proxy["env"].append({"name": name, "value": value})


def _set_probe_ports(docs, port):
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        _container(docs)[1][probe]["grpc"]["port"] = port


def tls_mutations():
    """Breaks of what a -tls variant needs; the volume names are the tls
    component's."""
    def drop_secret_volume(docs):
        pod_spec = _container(docs)[0]["spec"]["template"]["spec"]
        pod_spec["volumes"].remove(_volume(docs, "tls"))
        _container(docs)[1]["volumeMounts"].remove(_mount(docs, "tls"))

    def drop_health_port(docs):
        container = _container(docs)[1]
        container["ports"] = [p for p in container["ports"] if p.get("name") != "health"]

    def health_on_grpc_port(docs):
        _set_flag(docs, "health_listen", f"0.0.0.0:{GRPC_PORT}")
        _set_probe_ports(docs, GRPC_PORT)

    def nested_secret_mount(docs):
        # The flags follow the mount, so only the nesting is wrong.
        old = _mount(docs, "tls")["mountPath"].rstrip("/") + "/"
        _mount(docs, "tls")["mountPath"] = "/etc/ropeserve/tls"
        for d in docs:
            if d.get("kind") == "ConfigMap":
                for key, text in d.get("data", {}).items():
                    d["data"][key] = text.replace(f"={old}", "=/etc/ropeserve/tls/")

    def secret_field(key, value):
        return lambda docs: _volume(docs, "tls")["secret"].__setitem__(key, value)

    def no_fs_group(docs):
        _container(docs)[0]["spec"]["template"]["spec"]["securityContext"].pop("fsGroup")

    def base_flagfiles(docs):
        args = _container(docs)[1]["args"]
        args[0] = ",".join(p for p in args[0].split(",") if not p.endswith("/tls.flags"))

    def h2c_service(docs):
        service = next(d for d in docs if d["kind"] == "Service")
        for port in service["spec"]["ports"]:
            if port["port"] == GRPC_PORT:
                port["appProtocol"] = "kubernetes.io/h2c"

    return [
        ("TLS on, probes on the TLS port", lambda docs: _set_probe_ports(docs, GRPC_PORT)),
        ("no --health_listen", lambda docs: _set_flag(docs, "health_listen", None)),
        ("health port on loopback",
         lambda docs: _set_flag(docs, "health_listen", "127.0.0.1:50052")),
        ("health port not declared", drop_health_port),
        ("health port is the gRPC port", health_on_grpc_port),
        ("Secret volume dropped", drop_secret_volume),
        ("key outside the Secret mount",
         lambda docs: _set_flag(docs, "tls_key_file", "/etc/ropeserve/tls.key")),
        ("file not among the Secret's items",
         lambda docs: _set_flag(docs, "tls_client_ca_file", "/etc/ropeserve-tls/ca.pem")),
        ("Secret mounted inside the ConfigMap mount", nested_secret_mount),
        ("Secret readable by every user", secret_field("defaultMode", 0o644)),
        ("Secret optional", secret_field("optional", True)),
        ("Secret files unreadable by the server (no fsGroup)", no_fs_group),
        ("Secret files unreadable by the server (owner only)",
         secret_field("defaultMode", 0o400)),
        ("Secret mounted writable",
         lambda docs: _mount(docs, "tls").__setitem__("readOnly", False)),
        ("tls.flags not read", base_flagfiles),
        ("no token auth", lambda docs: _set_flag(docs, "auth_token_file", None)),
        ("no mutual TLS", lambda docs: _set_proxy_env(docs, "ROPE_PROXY_CLIENT_CA", None)),
        ("proxy serves plaintext", lambda docs: _set_proxy_env(docs, "ROPE_PROXY_TLS_CERT",
                                                               None)),
        ("plaintext from the proxy to ropeserve",
         lambda docs: _set_proxy_env(docs, "ROPE_BACKEND_TLS", None)),
        ("proxy certificate outside a Secret",
         lambda docs: _set_proxy_env(docs, "ROPE_PROXY_TLS_CERT", "/etc/ropeserve/tls.crt")),
        ("TLS port announced as cleartext HTTP/2", h2c_service),
    ]


def k8s_mutations(variant):
    """(what breaks, function that breaks it in place)."""
    base_variant, needs_tls = split_variant(variant)
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

    def mem_limit(value):
        def mutate(docs):
            resources = _container(docs)[1]["resources"]
            resources["limits"]["memory"] = value
            resources["requests"]["memory"] = value
        return mutate

    def no_tolerations(docs):
        _container(docs)[0]["spec"]["template"]["spec"].pop("tolerations", None)

    def no_proxy(docs):
        pod_spec = _container(docs)[0]["spec"]["template"]["spec"]
        pod_spec["containers"].remove(_proxy(docs))

    def socket_not_shared(docs):
        _proxy(docs)["volumeMounts"] = []

    def socket_on_disk(docs):
        _volume(docs, "grpc-socket")["emptyDir"].pop("medium", None)

    def socket_shared_with_a_third(docs):
        pod_spec = _container(docs)[0]["spec"]["template"]["spec"]
        extra = copy.deepcopy(_proxy(docs))
        extra["name"] = "debug"
        pod_spec["containers"].append(extra)

    mutations = [
        ("ropeserve on TCP", lambda docs: _set_flag(docs, "listen", f"0.0.0.0:{GRPC_PORT}")),
        ("ropeserve on TCP beside its socket", lambda docs: _set_flag(
            docs, "listen", f"0.0.0.0:{GRPC_PORT},unix:///run/ropeserve/grpc.sock")),
        ("no front proxy", no_proxy),
        ("proxy to another socket",
         lambda docs: _set_proxy_env(docs, "ROPE_BACKEND", "unix@/tmp/other.sock")),
        ("socket directory not shared with the proxy", socket_not_shared),
        ("socket directory on disk", socket_on_disk),
        ("socket directory shared with a third container", socket_shared_with_a_third),
        ("proxy with a writable root",
         lambda docs: _proxy(docs)["securityContext"].__setitem__("readOnlyRootFilesystem",
                                                                    False)),
        ("proxy without limits", lambda docs: _proxy(docs)["resources"].pop("limits")),
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
        ("no teardown bound", lambda docs: _set_flag(docs, "teardown_timeout", None)),
        ("teardown bound outside the grace period",
         lambda docs: _set_flag(docs, "teardown_timeout", "20s")),
        ("no max connection age", lambda docs: _set_flag(docs, "max_connection_age", None)),
        ("infinite max connection age", lambda docs: _set_flag(docs, "max_connection_age",
                                                                "inf")),
        ("no in-flight budget", lambda docs: _set_flag(docs, "max_inflight_bytes", None)),
        ("in-flight budget from the cgroup, not checkable",
         lambda docs: _set_flag(docs, "max_inflight_bytes", "-1")),
        ("in-flight budget as large as the memory limit", lambda docs: _set_flag(
            docs, "max_inflight_bytes",
            str(int(parse_quantity(_container(docs)[1]["resources"]["limits"]["memory"]))))),
        ("table cache that leaves no room", lambda docs: _set_flag(
            docs, "table_cache_bytes",
            str(int(parse_quantity(_container(docs)[1]["resources"]["limits"]["memory"])) // 2))),
        ("memory limit below the bound", mem_limit("512Mi")),
        ("in-flight budget below four largest messages",
         lambda docs: _set_flag(docs, "max_inflight_bytes", "1")),
        ("no max connection age grace",
         lambda docs: _set_flag(docs, "max_connection_age_grace", None)),
        ("infinite max connection age grace",
         lambda docs: _set_flag(docs, "max_connection_age_grace", "inf")),
        ("service with a cluster IP", clusterip),
        ("no scrape annotation", no_scrape),
        ("PDB on other pods", pdb_selector),
        ("no HPA", no_hpa),
    ]
    if base_variant == "gpu":
        mutations += [("no GPU limit", gpu_limit(None)), ("two GPUs", gpu_limit(2)),
                      ("no GPU toleration", no_tolerations)]
    else:
        mutations += [("a GPU on a CPU pod", gpu_limit(1))]
    if needs_tls:
        mutations += tls_mutations()
    else:
        mutations += [("token auth without TLS",
                       lambda docs: _set_flag(docs, "auth_token_file", "/etc/ropeserve/tokens")),
                      ("per-client stream limit behind the proxy without tokens",
                       lambda docs: _set_flag(docs, "max_streams_per_client", "64")),
                      ("per-client byte share (the default) behind the proxy without tokens",
                       lambda docs: _set_flag(docs, "max_inflight_bytes_per_client", None)),
                      ("TLS without a health port or a Secret",
                       lambda docs: [_set_flag(docs, "tls_cert_file", "/etc/ropeserve/tls.crt"),
                                     _set_flag(docs, "tls_key_file", "/etc/ropeserve/tls.key")])]
    return mutations


def compose_mutations():
    def server(doc):
        return doc["services"]["ropeserve"]

    def public_port(doc):
        server(doc)["ports"] = ["50051:50051"]

    def short_stop(doc):
        server(doc)["stop_grace_period"] = "10s"

    def long_teardown(doc):
        server(doc)["command"] = [a for a in server(doc)["command"]
                                  if not a.startswith("--teardown_timeout=")]
        server(doc)["command"].append("--teardown_timeout=30s")

    def no_wait(doc):
        doc["services"]["ropeload"]["depends_on"] = ["ropeserve"]

    def grpc_published(doc):
        server(doc)["ports"].append(f"127.0.0.1:{GRPC_PORT}:{GRPC_PORT}")

    def load_bypasses_proxy(doc):
        doc["services"]["ropeload"]["command"] = [
            a.replace(f"{PROXY}:", "ropeserve:") for a in doc["services"]["ropeload"]["command"]]

    def proxy_public(doc):
        doc["services"][PROXY]["ports"] = [f"{GRPC_PORT}:{GRPC_PORT}"]

    def socket_not_shared(doc):
        doc["services"][PROXY]["volumes"] = []

    def server_on_tcp(doc):
        server(doc)["command"] = [a for a in server(doc)["command"]
                                  if not a.startswith("--listen=")]
        server(doc)["command"].append(f"--listen=0.0.0.0:{GRPC_PORT}")

    def per_client_streams(doc):
        server(doc)["command"] = [a for a in server(doc)["command"]
                                  if not a.startswith("--max_streams_per_client=")]

    return [
        ("per-client stream limit (the default) behind the proxy", per_client_streams),
        ("gRPC published by the server", grpc_published),
        ("load run bypasses the proxy", load_bypasses_proxy),
        ("no proxy", lambda doc: doc["services"].pop(PROXY)),
        ("proxy on every interface", proxy_public),
        ("socket not shared with the proxy", socket_not_shared),
        ("server on TCP", server_on_tcp),
        ("port on every interface", public_port),
        ("writable root", lambda doc: server(doc).__setitem__("read_only", False)),
        ("stop grace shorter than the drain", short_stop),
        ("teardown bound outside the stop grace", long_teardown),
        ("load run does not wait for health", no_wait),
        ("no load run", lambda doc: doc["services"].pop("ropeload")),
    ]


# ---- the same-host sidecar example ----------------------------------

def _sidecar_parts(docs, c):
    deployment = one(docs, "Deployment", c)
    if deployment is None:
        return None, None, []
    pod = deployment["spec"]["template"]["spec"]
    containers = pod.get("containers", [])
    server = [x for x in containers if x.get("image", "").split(":")[0].endswith("ropeserve")]
    c.expect(len(server) == 1, f"expected one ropeserve container, found {len(server)}")
    others = [x for x in containers if x not in server]
    c.expect(len(others) >= 1, "no client container beside the ropeserve sidecar")
    return pod, server[0] if server else None, others


def _mounts_of(container):
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def check_sidecar(docs):
    c = Checker()
    pod, server, clients = _sidecar_parts(docs, c)
    if pod is None or server is None:
        return c.failures
    flags = {}
    for arg in server.get("args", []):
        name, _, value = arg.partition("=")
        flags[name.lstrip("-")] = value
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    memory_dirs = {n for n, v in volumes.items()
                   if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") == "Memory"}
    server_mounts = _mounts_of(server)

    listen = [e.strip() for e in flags.get("listen", "").split(",") if e.strip()]
    sockets = [e[len("unix://"):] for e in listen if e.startswith("unix://")]
    c.expect(sockets, "ropeserve: --listen has no unix:///path socket")
    tcp = [e for e in listen if not e.startswith("unix://")]
    c.expect(not tcp, f"ropeserve: --listen also serves TCP {tcp}: the sidecar needs only "
             "its socket (health goes on --health_listen)")
    for path in sockets:
        directory = path.rsplit("/", 1)[0]
        shared = [n for n, m in server_mounts.items() if m.rstrip("/") == directory]
        if not c.expect(shared and shared[0] in memory_dirs,
                        f"socket {path}: its directory is not an in-memory emptyDir mount"):
            continue
        c.expect(any(shared[0] in _mounts_of(x) for x in clients),
                 f"socket {path}: volume {shared[0]} is not mounted in the client container")
    mode = flags.get("unix_socket_mode", "0660")
    c.expect(re.fullmatch(r"0?[0-7]{3}", mode) and int(mode, 8) & 0o007 == 0,
             f"ropeserve: --unix_socket_mode={mode} grants access to other users")

    shm = [n for n, m in server_mounts.items() if m.rstrip("/") == "/dev/shm"]
    if c.expect(shm and shm[0] in memory_dirs, "ropeserve: /dev/shm is not an in-memory emptyDir"):
        for x in clients:
            c.expect(_mounts_of(x).get(shm[0], "").rstrip("/") == "/dev/shm",
                     f"container {x['name']}: volume {shm[0]} is not its /dev/shm")
        limit = parse_quantity(str(volumes[shm[0]]["emptyDir"].get("sizeLimit", "0")))
        mapped = int(flags.get("shm_max_mapped_bytes", str(16 << 30)))
        c.expect(0 < mapped <= limit, f"--shm_max_mapped_bytes={mapped}: must be > 0 and within "
                 f"the /dev/shm volume's sizeLimit ({limit:.0f} bytes)")

    user = pod.get("securityContext", {}).get("runAsUser")
    c.expect(user is not None, "the pod sets no runAsUser (both containers must share one user)")
    for x in [server] + clients:
        own = x.get("securityContext", {}).get("runAsUser")
        c.expect(own is None or own == user,
                 f"container {x['name']}: runAsUser {own} differs from the pod's {user}")

    health = flags.get("health_listen")
    if c.expect(health, "ropeserve: no --health_listen port for the kubelet's probes"):
        _, port = host_port(health)
        declared = {p.get("containerPort") for p in server.get("ports", [])}
        c.expect(port in declared, f"--health_listen port {port} is not a declared container port")
        for probe in ("startupProbe", "readinessProbe"):
            c.expect(server.get(probe, {}).get("grpc", {}).get("port") == port,
                     f"ropeserve: {probe} is not a gRPC probe on the health port {port}")
    grace = parse_duration(flags.get("shutdown_grace_period", "25s"))
    c.expect(pod.get("terminationGracePeriodSeconds", 30) > grace,
             f"terminationGracePeriodSeconds must exceed --shutdown_grace_period ({grace:.0f}s)")
    return c.failures


def _sidecar_container(docs, server):
    for x in docs[0]["spec"]["template"]["spec"]["containers"]:
        if (x["image"] == "ropeserve") == server:
            return x
    raise KeyError("container")


def _sidecar_arg(docs, name, value):
    args = _sidecar_container(docs, True)["args"]
    args[:] = [a for a in args if not a.startswith(f"--{name}=")] + [f"--{name}={value}"]


def sidecar_mutations():
    pod = lambda d: d[0]["spec"]["template"]["spec"]  # noqa: E731
    volume = lambda d, n: next(v for v in pod(d)["volumes"] if v["name"] == n)  # noqa: E731
    return [
        ("no Unix socket", lambda d: _sidecar_arg(d, "listen", "0.0.0.0:50051")),
        ("TCP beside the socket",
         lambda d: _sidecar_arg(d, "listen", "0.0.0.0:50051,unix:///run/ropeserve/rope.sock")),
        ("socket mode open to others", lambda d: _sidecar_arg(d, "unix_socket_mode", "0666")),
        ("socket directory not in memory",
         lambda d: volume(d, "ropeserve-socket")["emptyDir"].pop("medium")),
        ("socket volume not in the client",
         lambda d: _sidecar_container(d, False)["volumeMounts"].pop(1)),
        ("/dev/shm on disk", lambda d: volume(d, "shm")["emptyDir"].pop("medium")),
        ("client without the shared /dev/shm",
         lambda d: _sidecar_container(d, False)["volumeMounts"].pop(0)),
        ("shared memory off", lambda d: _sidecar_arg(d, "shm_max_mapped_bytes", "0")),
        ("mapped bytes over the volume", lambda d: _sidecar_arg(d, "shm_max_mapped_bytes",
                                                                str(4 << 30))),
        ("containers as different users",
         lambda d: _sidecar_container(d, True)["securityContext"].update(runAsUser=10002)),
        ("no health port", lambda d: _sidecar_container(d, True)["args"].remove(
            "--health_listen=0.0.0.0:50052")),
        ("readiness probe elsewhere",
         lambda d: _sidecar_container(d, True)["readinessProbe"]["grpc"].update(port=50051)),
        ("grace shorter than the drain", lambda d: pod(d).update(terminationGracePeriodSeconds=5)),
    ]


def sidecar_self_test(docs):
    if check_sidecar(docs):
        return ["the unmodified sidecar example fails the check"]
    problems = []
    for what, mutate in sidecar_mutations():
        broken = copy.deepcopy(docs)
        mutate(broken)
        if not check_sidecar(broken):
            problems.append(f"sidecar check missed: {what}")
    return problems


def check_kserve(docs):
    """The KServe example (deploy/k8s/examples/kserve), rendered: the
    ServingRuntime runs ropeserve on the port KServe routes gRPC to, with the
    repository KServe mounts, and the InferenceService selects it."""
    c = Checker()
    runtimes = [d for d in docs if d.get("kind") == "ServingRuntime"]
    services = [d for d in docs if d.get("kind") == "InferenceService"]
    c.expect(len(runtimes) == 1, "one ServingRuntime")
    c.expect(len(services) == 1, "one InferenceService")
    if c.failures:
        return c.failures
    runtime, service = runtimes[0], services[0]
    spec = runtime.get("spec", {})
    c.expect("grpc-v2" in spec.get("protocolVersions", []),
             "ServingRuntime protocolVersions has grpc-v2 (inference.GRPCInferenceService)")
    containers = spec.get("containers", [])
    c.expect(len(containers) == 1, "ServingRuntime has one container")
    if c.failures:
        return c.failures
    container = containers[0]
    args = container.get("args", [])
    listen = [a.split("=", 1)[1] for a in args if a.startswith("--listen=")]
    c.expect(len(listen) == 1, "the container sets --listen once")
    port = host_port(listen[0])[1] if listen else None
    h2c = [p for p in container.get("ports", []) if p.get("name") == "h2c"]
    c.expect(len(h2c) == 1 and h2c[0].get("containerPort") == port,
             f"the port named h2c (KServe's gRPC port) is --listen's {port}")
    c.expect("--model_repository=/mnt/models" in args,
             "--model_repository=/mnt/models (where KServe puts storageUri)")
    for probe in ("readinessProbe", "livenessProbe"):
        c.expect(container.get(probe, {}).get("grpc", {}).get("port") == port,
                 f"{probe} is a gRPC probe of port {port}")
    security = container.get("securityContext", {})
    c.expect(security.get("runAsNonRoot") is True, "the container runs as non-root")
    c.expect("ALL" in security.get("capabilities", {}).get("drop", []), "capabilities drop ALL")
    c.expect("limits" in container.get("resources", {}), "the container has resource limits")
    model = service.get("spec", {}).get("predictor", {}).get("model", {})
    formats = [f.get("name") for f in spec.get("supportedModelFormats", [])]
    c.expect(model.get("runtime") == runtime.get("metadata", {}).get("name"),
             "the InferenceService names the ServingRuntime")
    c.expect(model.get("modelFormat", {}).get("name") in formats,
             "the InferenceService's model format is one the runtime supports")
    c.expect(model.get("protocolVersion") == "grpc-v2", "the InferenceService speaks grpc-v2")
    c.expect(bool(model.get("storageUri")), "the InferenceService has a storageUri")
    return c.failures


def kserve_mutations():
    def container(docs):
        return next(d for d in docs if d["kind"] == "ServingRuntime")["spec"]["containers"][0]

    def model(docs):
        return next(d for d in docs if d["kind"] == "InferenceService")["spec"]["predictor"]["model"]

    def runtime(docs):
        return next(d for d in docs if d["kind"] == "ServingRuntime")["spec"]

    return [
        ("rest protocol only", lambda d: runtime(d).update(protocolVersions=["v2"])),
        ("h2c port elsewhere", lambda d: container(d)["ports"][0].update(containerPort=9000)),
        ("no model repository", lambda d: container(d)["args"].remove(
            "--model_repository=/mnt/models")),
        ("readiness probe elsewhere",
         lambda d: container(d)["readinessProbe"]["grpc"].update(port=50051)),
        ("root", lambda d: container(d)["securityContext"].update(runAsNonRoot=False)),
        ("no limits", lambda d: container(d)["resources"].pop("limits")),
        ("other runtime", lambda d: model(d).update(runtime="triton")),
        ("other format", lambda d: model(d)["modelFormat"].update(name="onnx")),
        ("rest predictor", lambda d: model(d).update(protocolVersion="v2")),
    ]


def kserve_self_test(docs):
    if check_kserve(docs):
        return ["the unmodified KServe example fails the check"]
    problems = []
    for what, mutate in kserve_mutations():
        broken = copy.deepcopy(docs)
        mutate(broken)
        if not check_kserve(broken):
            problems.append(f"kserve check missed: {what}")
    return problems


def self_test(docs, variant, compose):
    problems = []
    if check_k8s(docs, variant):
        # The mutations assume the structure the check asserts.
        return [f"the unmodified {variant} manifests fail the check"]
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
    parser.add_argument("mode", choices=["k8s", "compose", "self-test", "sidecar",
                                         "sidecar-self-test", "kserve", "kserve-self-test"])
    parser.add_argument("file", help="rendered manifests (k8s, self-test) or a compose file")
    parser.add_argument("--variant", choices=VARIANTS)
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
    elif args.mode == "sidecar":
        failures = check_sidecar(docs)
    elif args.mode == "kserve":
        failures = check_kserve(docs)
    elif args.mode == "kserve-self-test":
        failures = kserve_self_test(docs)
    elif args.mode == "sidecar-self-test":
        failures = sidecar_self_test(docs)
    else:
        failures = self_test(docs, args.variant, compose)
    for failure in failures:
        print(f"check_manifests {args.mode} {args.file}: {failure}", file=sys.stderr)
    if not failures:
        variant = f" {args.variant}" if args.variant else ""
        caught = ""
        if args.mode == "self-test":
            caught = f" ({len(k8s_mutations(args.variant))} k8s breaks caught"
            caught += f", {len(compose_mutations())} compose)" if compose else ")"
        elif args.mode == "sidecar-self-test":
            caught = f" ({len(sidecar_mutations())} sidecar breaks caught)"
        elif args.mode == "kserve-self-test":
            caught = f" ({len(kserve_mutations())} KServe breaks caught)"
        print(f"check_manifests {args.mode}{variant} {args.file}: ok{caught}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

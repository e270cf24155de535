#!/usr/bin/python3
"""Runs every command the docs show, as written, on a fresh checkout.

    docs_commands_test.py --source SRC --build BUILD [--doc PATH]...

Pages: README.md, docs/*.md, client/README.md, client/python/README.md.
From each page it takes the fenced ```sh blocks (each line a command; a
trailing backslash continues it; comment lines are skipped) and the
```python blocks (each a script), and runs them in a copy of the checkout
(the tracked files of SRC, with `build` pointing at BUILD: what a fresh clone
has after scripts/build.sh), one bash session per page, so that a server a
page starts with `&` is the page's job %1. PATH has build/bin first (pages
say `ropectl` as well as `build/bin/ropectl`) and /usr/bin before any other
python3; PYTHONPATH has the staged ropeserve package.

A page that starts no server itself gets one before its first command, as
docs/operations.md starts it: ropeserve --listen=127.0.0.1:50051
--metrics_port=9090 --metrics_host=127.0.0.1. After a command that ends with
`&` and names --listen=HOST:PORT, the test waits (30 s at most) until that
port accepts connections, as a reader would before typing the next line.
Everything runs in a private network namespace (unshare -rn: its own
127.0.0.1, so 50051 and 9090 are free whatever else runs on the machine).

Markers, in the page itself:
  `# docs-test: skip (REASON)`  at the end of a command line: not run (e.g.
      it needs Docker, a GPU, or is the whole test suite); the reason is
      printed.
  `# docs-test: fails (TEXT)`   the command must exit non-zero and print TEXT
      (a documented error).
  `<!-- docs-test: skip (REASON) -->` on the line before a fence: the whole
      block is not run.
  `# docs-test: skip (REASON)`  as the first line of a python block: likewise.
Every other command must exit 0. Exit status: 0 pass, 1 a command failed,
77 skipped (no private network namespace and the ports are taken).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PAGES = ["README.md", "docs/design.md", "docs/operations.md", "docs/models.md", "docs/testing.md",
         "client/README.md", "client/python/README.md"]
SKIP = re.compile(r"#\s*docs-test:\s*skip\s*\((.*)\)\s*$")
FAILS = re.compile(r"#\s*docs-test:\s*fails\s*\((.*)\)\s*$")
BLOCK_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.*)\)\s*-->")
JOB_SPEC = re.compile(r"\b(kill|wait|fg|bg)\b[^#]*%\d")
LISTEN = re.compile(r"--listen=([0-9.]+|localhost):(\d+)")
SERVER = "build/bin/ropeserve --listen=127.0.0.1:50051 --metrics_port=9090 --metrics_host=127.0.0.1"
COMMAND_TIMEOUT_S = 120
PAGE_TIMEOUT_S = 600


class Command:
    def __init__(self, page, line, text, kind, skip=None, fails=None):
        self.page, self.line, self.text, self.kind = page, line, text, kind
        self.skip, self.fails = skip, fails

    def where(self):
        return "%s:%d" % (self.page, self.line)


def extract(page, text):
    """The commands of a page, in order."""
    commands = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence not in ("```sh", "```python"):
            i += 1
            continue
        block_skip = BLOCK_SKIP.search(lines[i - 1]) if i > 0 else None
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        if fence == "```python":
            code = "\n".join(l for _, l in body)
            first = body[0][1] if body else ""
            skip = block_skip.group(1) if block_skip else (
                SKIP.search(first).group(1) if SKIP.search(first) else None)
            commands.append(Command(page, start, code, "python", skip=skip))
            continue
        pending, pending_line = "", 0
        for number, line in body:
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if not pending:
                pending_line = number
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            skip = SKIP.search(pending)
            fails = FAILS.search(pending)
            commands.append(Command(page, pending_line, pending, "sh",
                                    skip=block_skip.group(1) if block_skip else
                                    (skip.group(1) if skip else None),
                                    fails=fails.group(1) if fails else None))
            pending = ""
    return commands


def fresh_checkout(source, build, root):
    """The tracked files of `source` under root/checkout, and root/checkout/build -> build."""
    checkout = os.path.join(root, "checkout")
    listed = subprocess.run(["git", "-C", source, "ls-files", "-z"], capture_output=True, check=False)
    files = [f for f in listed.stdout.decode().split("\0") if f] if listed.returncode == 0 else None
    if files is None:  # not a git checkout: the tree less build outputs
        shutil.copytree(source, checkout, ignore=shutil.ignore_patterns("build*", ".git"))
    else:
        for f in files:
            if not os.path.exists(os.path.join(source, f)):
                continue  # deleted in the work tree
            os.makedirs(os.path.dirname(os.path.join(checkout, f)), exist_ok=True)
            shutil.copy2(os.path.join(source, f), os.path.join(checkout, f), follow_symlinks=False)
    os.symlink(os.path.abspath(build), os.path.join(checkout, "build"))
    return checkout


def port_open(host, port):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(host, port, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(host, port):
            return True
        time.sleep(0.1)
    return False


def script_for(commands, starts_server, log_dir):
    """A bash script running the page's commands, reporting each one's status."""
    out = ["set +e", "exec </dev/null"]
    if not starts_server:
        # Not one of the page's jobs: its own first `&` stays %1.
        out.append("%s > %s/server.log 2>&1 &" % (SERVER, log_dir))
        out.append("__docs_server=$!; disown")
        out.append("__docs_wait 127.0.0.1 50051")
    for n, c in enumerate(commands):
        if c.skip is not None:
            continue
        out.append("echo '::start %d' >>\"$DOCS_STATUS\"" % n)
        if c.kind == "python":
            path = os.path.join(log_dir, "%d.py" % n)
            with open(path, "w") as f:
                f.write(c.text + "\n")
            out.append("timeout %d /usr/bin/python3 %s > %s/%d.out 2>&1" % (
                COMMAND_TIMEOUT_S, path, log_dir, n))
            out.append("echo \"::status %d $?\" >>\"$DOCS_STATUS\"" % n)
        elif c.text.rstrip().endswith("&"):
            out.append(c.text)
            listen = LISTEN.search(c.text)
            if listen:
                out.append("__docs_wait %s %s" % (listen.group(1), listen.group(2)))
            out.append("echo '::status %d 0' >>\"$DOCS_STATUS\"" % n)
        elif JOB_SPEC.search(c.text):
            # kill %1, wait %1: the page's own jobs, so in this shell, not a child.
            out.append("{ %s ; } > %s/%d.out 2>&1" % (c.text, log_dir, n))
            out.append("echo \"::status %d $?\" >>\"$DOCS_STATUS\"" % n)
        else:
            out.append("timeout %d bash -c %s > %s/%d.out 2>&1" % (
                COMMAND_TIMEOUT_S, shquote(c.text), log_dir, n))
            out.append("echo \"::status %d $?\" >>\"$DOCS_STATUS\"" % n)
    out.append("kill -TERM $(jobs -p) 2>/dev/null; wait")
    if not starts_server:  # not a job: wait for its drain by its pid (300 s at most)
        out.append("kill -TERM $__docs_server 2>/dev/null")
        out.append("for i in $(seq 3000); do kill -0 $__docs_server 2>/dev/null || break; "
                   "sleep 0.1; done")
    return "\n".join(out) + "\n"


def shquote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


WAIT_FUNCTION = r'''
__docs_wait() {  # HOST PORT: until it accepts, 30 s at most
  for i in $(seq 300); do
    (exec 9<>/dev/tcp/$1/$2) 2>/dev/null && return 0
    sleep 0.1
  done
  echo "docs-test: nothing listens on $1:$2 after 30 s" >&2; return 1
}
'''


def run_page(page, commands, checkout, env, work):
    """Runs one page; returns the list of failures (strings)."""
    failures = []
    log_dir = os.path.join(work, re.sub(r"[^A-Za-z0-9]", "_", page))
    os.makedirs(log_dir, exist_ok=True)
    starts_server = any(c.kind == "sh" and c.skip is None and "ropeserve --listen=127.0.0.1:50051" in c.text
                        and c.text.rstrip().endswith("&") for c in commands)
    script = WAIT_FUNCTION + script_for(commands, starts_server, log_dir)
    with open(os.path.join(log_dir, "script.sh"), "w") as f:
        f.write(script)
    status_path = os.path.join(log_dir, "status")
    open(status_path, "w").close()
    proc = subprocess.run(["bash", os.path.join(log_dir, "script.sh")], cwd=checkout,
                          env=dict(env, DOCS_STATUS=status_path), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=PAGE_TIMEOUT_S)
    statuses = {}
    with open(status_path) as f:
        for line in f:
            parts = line.split()
            if parts[0] == "::status":
                statuses[int(parts[1])] = int(parts[2])
    for n, c in enumerate(commands):
        if c.skip is not None:
            print("skip %s: %s  (%s)" % (c.where(), c.text.split("#")[0].strip()[:80], c.skip))
            continue
        code = statuses.get(n)
        output_path = os.path.join(log_dir, "%d.out" % n)
        output = open(output_path).read() if os.path.exists(output_path) else ""
        shown = c.text.split("\n")[0][:100]
        if c.fails is not None:
            ok = code not in (None, 0) and c.fails in output
        else:
            ok = code == 0
        if ok:
            print("ok   %s: %s" % (c.where(), shown))
        else:
            failures.append("%s: %s\n  exit %s%s\n  %s" % (
                c.where(), c.text, code, " (expected a failure printing %r)" % c.fails if c.fails else "",
                output.strip().replace("\n", "\n  ")[-3000:]))
            print("FAIL %s: %s (exit %s)" % (c.where(), shown, code))
    if proc.stderr.strip():
        print("  (%s's shell said: %s)" % (page, proc.stderr.strip()[-500:]))
    return failures


def in_private_network():
    """Re-runs this script in its own network namespace (unshare -rn); None when already in
    one or when that is impossible."""
    if os.environ.get("ROPE_DOCS_TEST_NETNS") == "1":
        return None
    if shutil.which("unshare") is None:
        return None
    env = dict(os.environ, ROPE_DOCS_TEST_NETNS="1")
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    inner = "ip link set lo up && exec %s" % " ".join(shquote(a) for a in [sys.executable] + sys.argv)
    return subprocess.run(["unshare", "-rn", "bash", "-c", inner], env=env).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--doc", action="append", help="only these pages (paths as in PAGES)")
    args = parser.parse_args()
    namespaced = in_private_network()
    if namespaced is not None:
        return namespaced
    if os.environ.get("ROPE_DOCS_TEST_NETNS") != "1" and (port_open("127.0.0.1", 50051)
                                                          or port_open("127.0.0.1", 9090)):
        print("SKIP: no private network namespace (unshare -rn) and 127.0.0.1:50051 or :9090 is taken")
        return 77
    pages = args.doc or PAGES
    work = tempfile.mkdtemp(prefix="rope-docs-test-")
    try:
        checkout = fresh_checkout(args.source, args.build, work)
        env = dict(os.environ)
        env["PATH"] = "%s/build/bin:/usr/bin:/bin:/usr/sbin:/sbin:%s" % (checkout, env.get("PATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(args.build, "client", "python")] + env.get("PYTHONPATH", "").split(os.pathsep))
        env.pop("GRPC_VERBOSITY", None)
        failures = []
        for page in pages:
            with open(os.path.join(checkout, page), encoding="utf-8") as f:
                commands = extract(page, f.read())
            print("== %s: %d commands" % (page, len(commands)))
            failures += run_page(page, commands, checkout, env, os.path.join(work, "logs"))
    finally:
        if os.environ.get("ROPE_DOCS_TEST_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work)
    if failures:
        print("\n%d documented command(s) failed:\n\n%s" % (len(failures), "\n\n".join(failures)))
        return 1
    print("every documented command ran as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

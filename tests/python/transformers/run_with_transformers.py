#!/usr/bin/python3
"""Runs the transformers model tests in a venv holding requirements.txt.

    run_with_transformers.py VENV_DIR [pytest args...]

Creates VENV_DIR (/usr/bin/python3 -m venv --system-site-packages) and
installs requirements.txt with pip from PyPI when the venv is missing or was
made from another requirements.txt, then runs pytest on this directory with
the venv's python. Exit 77 (skipped, the reason printed) when pip cannot
install them (no PyPI); otherwise pytest's status.
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
PIP_TIMEOUT_S = 600


def ensure_venv(venv):
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "requirements.txt")
    with open(REQUIREMENTS, encoding="utf-8") as f:
        wanted = f.read()
    if os.access(python, os.X_OK) and os.path.exists(stamp):
        with open(stamp, encoding="utf-8") as f:
            if f.read() == wanted:
                return python, None
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
    try:
        pip = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps",
                              "--disable-pip-version-check", "--timeout", "15", "--retries", "1",
                              "-r", REQUIREMENTS], capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        failed = pip.returncode != 0
        why = (pip.stderr.strip().splitlines() or ["pip exited %d" % pip.returncode])[-1]
    except subprocess.TimeoutExpired:
        failed, why = True, "pip took over %d s" % PIP_TIMEOUT_S
    if failed:
        shutil.rmtree(venv, ignore_errors=True)
        return None, why
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(wanted)
    return python, None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    python, why = ensure_venv(os.path.abspath(sys.argv[1]))
    if python is None:
        print("SKIP: could not install transformers from PyPI into a venv (%s); these tests need "
              "the packages of %s" % (why, REQUIREMENTS))
        return 77
    return subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", HERE]
                          + sys.argv[2:]).returncode


if __name__ == "__main__":
    sys.exit(main())

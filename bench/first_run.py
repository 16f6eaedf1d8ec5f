#!/usr/bin/env python3
"""`make demo` in a fresh clone, as a new user meets it: the clone of the committed tree, then
`make demo` timed from start to exit, with its phases: the dependencies (scripts/install-deps.sh
--run: the Debian packages it finds missing and .venv/ with the pinned wheel, downloaded afresh:
no pip cache), the build of build/frugal (no ccache) and the demo's training run. Also what
`make test` adds on top (the reference libraries and the MLflow environment), timed by
install-deps.sh itself, which `make demo` no longer waits for.

The Debian packages of this machine are already installed (a root apt-get on a shared machine is
not undone for a benchmark): their install time is not in the figure, and the JSON says so.

Writes bench/results/<date>/first_run.json and prints a summary.

  python3 bench/first_run.py [--keep DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import ROOT, common_fields, die, results_dir, save_result  # noqa: E402


def timed(cmd, cwd, env, log):
    """Runs `cmd` (a shell line) in cwd, its output appended to log; returns (seconds, output)."""
    t = time.perf_counter()
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
    s = time.perf_counter() - t
    with open(log, "a") as f:
        f.write(f"$ {cmd}\n{p.stdout}{p.stderr}\n")
    if p.returncode != 0:
        die(f"first_run: `{cmd}` exited {p.returncode}; see {log}:\n{(p.stdout + p.stderr)[-3000:]}", 1)
    return s, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", default=None, help="clone into DIR and keep it (default: a temporary folder, removed)")
    ap.add_argument("--results", default=None, help="results folder (default bench/results/<today>)")
    a = ap.parse_args()
    t0 = time.time()
    common = common_fields("first_run", False, 1)
    work = a.keep or tempfile.mkdtemp(prefix="frugal-first-run-")
    clone = os.path.join(work, "frugal")
    log = os.path.join(work, "first_run.log")
    env = dict(os.environ, PIP_NO_CACHE_DIR="1", CCACHE_DISABLE="1")
    env.pop("FRUGAL_PYTHON", None)
    try:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        # `make demo` is what the user types; its phases are read from the same run: install-deps
        # prints each environment's seconds, and the build and the demo are timed apart below.
        total, out = timed("make demo", clone, env, log)
        venv = [int(x) for x in re.findall(r"\.venv done \((\d+) s\)", out)]
        if not os.path.isdir(os.path.join(clone, ".venv")) or not venv:
            die(f"first_run: make demo made no .venv in the fresh clone; see {log}", 1)
        summary = os.path.join(clone, "runs", "demo", "summary.json")
        with open(summary) as f:
            s = json.load(f)
        extra, out_full = timed("bash scripts/install-deps.sh", clone, env, log)
        res = {
            "make_demo_s": round(total, 1),
            "venv_run_s": venv[0],
            "demo_train_wall_s": round(s.get("wall_s", 0), 1),
            "demo_steps": s.get("steps"),
            "build_and_rest_s": round(total - venv[0] - s.get("wall_s", 0), 1),
            "make_test_adds_install_s": round(extra, 1),
            "make_test_adds": re.findall(r"installing the Python packages of (\S+)", out_full),
            "debian_packages": "already installed on this machine: their download and install are not in make_demo_s",
            "installer": (re.findall(r"\.venv with (\w+)", out) or ["pip"])[0],
            "pip_cache": "off (PIP_NO_CACHE_DIR=1; uv runs with --no-cache): the wheels are downloaded afresh",
            "ccache": "off (CCACHE_DISABLE=1)",
        }
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    path = save_result(a.results or results_dir(), common, res, t0)
    m, sec = divmod(round(res["make_demo_s"]), 60)
    print(f"make demo in a fresh clone: {m}:{sec:02d} (.venv {res['venv_run_s']} s, demo run "
          f"{res['demo_train_wall_s']} s, build and the rest {res['build_and_rest_s']} s); make test would add "
          f"{res['make_test_adds_install_s']} s of installs -> {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()

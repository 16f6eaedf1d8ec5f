"""Helpers shared by the bench scripts (no third-party imports, so any Python 3 can load it):
the interpreter that has the PyTorch wheel, the machine's physical cores, the source revision,
and the results folder of a day."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def venv_python():
    """The project's venv interpreter (.venv/bin/python, where the PyTorch wheel that frugal is
    built against is installed), else python3 from PATH."""
    py = os.path.join(ROOT, ".venv", "bin", "python")
    return py if os.access(py, os.X_OK) else "python3"


def physical_cores():
    """Physical cores this process may run on: distinct (package, core) pairs of the CPUs in its
    affinity mask (/proc/cpuinfo), or the mask's size where cpuinfo does not say."""
    allowed = os.sched_getaffinity(0)
    cores, cpu, pkg = set(), None, "0"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key, val = key.strip(), val.strip()
                if key == "processor":
                    cpu, pkg = int(val), "0"
                elif key == "physical id":
                    pkg = val
                elif key == "core id" and cpu in allowed:
                    cores.add((pkg, val))
    except OSError:
        pass
    return len(cores) if cores else len(allowed)


def source_revision():
    """{"commit": ..., "modified": bool} of the checkout, or None outside git."""
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip() != ""
        return {"commit": commit, "modified": dirty}
    except (OSError, subprocess.CalledProcessError):
        return None


def results_dir(date=None):
    """bench/results/<YYYY-MM-DD>/ (today unless a date is given)."""
    return os.path.join(HERE, "results", date or time.strftime("%Y-%m-%d"))


def die(msg, code=2):
    print(msg, file=sys.stderr)
    sys.exit(code)

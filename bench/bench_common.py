"""Helpers shared by the bench scripts (no third-party imports, so any Python 3 can load it):
the interpreter that has the PyTorch wheel, the machine's physical cores, the source revision,
the results folder of a day, the facts every result file records (date, command, source commit,
machine), alternating A/B rounds, and the atomic write of a result file."""
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def source_revision(root=None):
    """{"commit": ..., "modified": bool, "tree": ...} of the checkout, or None outside git.

    "tree" is the git tree id of the working tree as it ran (tracked and untracked files, less the
    ignored ones): equal to `git rev-parse COMMIT^{tree}` of the commit whose code this is. It names
    the code even where the git metadata is older than the files (a copy of the working tree sent
    to another machine reads "modified" against a stale HEAD)."""
    root = root or ROOT

    def git(*args, **kw):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True,
                              **kw).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no") != ""
    except (OSError, subprocess.CalledProcessError):
        return None
    out = {"commit": commit, "modified": dirty}
    try:  # a scratch index, so the checkout's own index is left as it was
        with tempfile.TemporaryDirectory() as tmp:
            index = os.path.join(tmp, "index")
            real = git("rev-parse", "--git-path", "index")
            real = real if os.path.isabs(real) else os.path.join(root, real)
            if os.path.exists(real):
                shutil.copyfile(real, index)  # unchanged files are not hashed again
            env = dict(os.environ, GIT_INDEX_FILE=index)
            git("add", "-A", env=env)
            out["tree"] = git("write-tree", env=env)
    except (OSError, subprocess.CalledProcessError):
        pass  # a read-only checkout: the commit and "modified" still say something
    return out


def results_dir(date=None, quick=False):
    """bench/results/<YYYY-MM-DD>/ (today unless a date is given). A --quick pass (a smoke run of
    the bench: fewer steps and rounds) goes to bench/out/quick/<date>/ instead, so its figures
    never land among the kept results the docs are rendered from."""
    date = date or time.strftime("%Y-%m-%d")
    if quick:
        return os.path.join(HERE, "out", "quick", date)
    return os.path.join(HERE, "results", date)


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, else platform.processor()."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts():
    """What the machine was while a benchmark ran: CPU, cores, load average (a shared machine's
    load explains slow figures), kernel."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpu": cpu_model(), "physical_cores": physical_cores(), "logical_cpus": os.cpu_count(),
            "affinity_cpus": len(os.sched_getaffinity(0)), "loadavg_1_5_15": load,
            "kernel": platform.release(), "python": platform.python_version()}


def common_fields(bench, quick, rounds):
    """The fields every result file starts with: the benchmark's name, the date, the command that
    ran, whether it was a --quick pass, its alternating rounds, the source revision and the
    machine at the start."""
    return {"bench": bench, "date": time.strftime("%Y-%m-%d"), "quick": quick, "repeats": rounds,
            "source": source_revision(),
            "command": " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
            "machine": machine_facts()}


def write_json(path, obj):
    """Writes obj as indented JSON, atomically (a temp file renamed over the target), so an
    interrupted benchmark never leaves half a result file where a good one stood."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_result(res_dir, common, obj, t_start):
    """Writes <res_dir>/<bench>.json: the common fields, obj, the load average at the end and the
    benchmark's seconds. Returns the path."""
    out = dict(common, **obj)
    out["machine_end_loadavg_1_5_15"] = machine_facts()["loadavg_1_5_15"]
    out["bench_seconds"] = round(time.time() - t_start, 1)
    path = os.path.join(res_dir, common["bench"] + ".json")
    write_json(path, out)
    return path


def alternate(rounds, fns):
    """Runs each fn in turn, `rounds` rounds (A B C A B C ...), so that drift in the machine's
    speed hits every side alike; returns a list of results per fn."""
    res = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            res[i].append(fn())
    return res


def environment(changes):
    """This process's environment with `changes` applied: a value of None removes the variable."""
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def median(xs):
    return statistics.median(xs)


def frugal_binary(path=None):
    """The frugal binary (default build/frugal), or exit 2 saying to build it."""
    path = path or os.path.join(ROOT, "build", "frugal")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        die(f"{os.path.basename(sys.argv[0])}: {path} is not an executable; build it first (make build)")
    return path


def run(args, what, env=None, cwd=None):
    """Runs a command and returns its CompletedProcess (text output captured); on failure exits 1
    with the command and the end of its stderr."""
    p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        die(f"{what}: `{' '.join(args)}` exited {p.returncode}:\n{p.stderr[-3000:]}", 1)
    return p


def shown(path):
    """A path relative to the checkout where it lies inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def die(msg, code=2):
    print(msg, file=sys.stderr)
    sys.exit(code)

#!/usr/bin/env python3
"""What the trackers cost a run: training throughput with [track] tensorboard and MLflow on,
against the same run with them off (target: within 1%).

Four sides, alternating over --rounds rounds so that a drift in the machine's speed hits all
alike (the ratio to "off" is also taken within each round, and its median reported): off,
tensorboard (event files), mlflow (a real `mlflow server` on loopback, from
.venv-mlflow, with a temporary SQLite store), and both. Every run logs at every step
(train.log_every = 1, the trackers' worst case) on the demo task, for two shapes: "tiny" (a step
of a few milliseconds, where a per-step cost would show) and "mid" (4 layers x 4 heads x 256,
block 128, micro-batch 16). The figure is summary.json's tokens_per_s (the whole session: steps,
evaluations, checkpoints); recorded beside it: the process's wall time, start to exit (MLflow's
final flush and artifact upload included), the training thread's own time in the trackers per log
step (summary.json's trackers.*.trainer_thread_s: the whole of their cost to training, which the
sending thread does not add to), and the CPU time the local MLflow server spent meanwhile (on a
machine of few cores it competes with training; a team's server runs elsewhere).

Writes bench/results/<date>/tracker_overhead.json and prints a table.

  .venv/bin/python bench/tracker_overhead.py [--frugal build/frugal] [--rounds 5] [--shapes tiny,mid]
  .venv/bin/python bench/tracker_overhead.py --quick   # 2 rounds, tiny only (bench/out/quick/<date>/)
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench_common import ROOT, alternate, common_fields, die, frugal_binary, median, results_dir, save_result

SHAPES = {
    "tiny": dict(layers=1, heads=2, embd=32, block=32, batch=8, steps=400),
    "mid": dict(layers=4, heads=4, embd=256, block=128, batch=16, steps=60),
}
SIDES = {
    "off": [],
    "tensorboard": ["track.tensorboard=true"],
    "mlflow": ["track.mlflow_uri={uri}"],
    "both": ["track.tensorboard=true", "track.mlflow_uri={uri}"],
}


def start_mlflow(tmp):
    mlflow = os.path.join(ROOT, ".venv-mlflow", "bin", "mlflow")
    if not os.access(mlflow, os.X_OK):
        die(f"{mlflow} not found: scripts/install-deps.sh makes .venv-mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                          "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db", "--artifacts-destination",
                          f"{tmp}/artifacts"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True,
                         env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
    uri = f"http://127.0.0.1:{port}"
    for _ in range(360):
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2):
                return p, uri
        except OSError:
            time.sleep(0.5)
    die("mlflow server did not start")


def group_cpu_s(pgid):
    """CPU seconds (user + system) of every live process in process group `pgid` (the MLflow
    server and its workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def train_once(frugal, work, shape, side, uri, server_pgid, k):
    s = SHAPES[shape]
    name = f"{shape}-{side}-{k}"
    sets = [f"run.out_dir={work}", f"run.name={name}", "run.threads=1", f"model.layers={s['layers']}",
            f"model.heads={s['heads']}", f"model.embd={s['embd']}", f"model.block={s['block']}",
            f"data.micro_batch={s['batch']}", f"train.steps={s['steps']}", "train.log_every=1",
            f"train.eval_every={s['steps'] // 4}", "train.eval_batches=2", "train.answer_samples=0",
            f"checkpoint.every_steps={s['steps'] // 2}", "track.mlflow_experiment=bench"]
    sets += [x.format(uri=uri) for x in SIDES[side]]
    cpu0 = group_cpu_s(server_pgid)
    t0 = time.time()
    p = subprocess.run([frugal, "train", "--quiet"] + [a for x in sets for a in ("--set", x)],
                       capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        die(f"{name}: frugal train exited {p.returncode}:\n{p.stderr[-2000:]}")
    summary = json.load(open(os.path.join(work, name, "summary.json")))
    tr = summary.get("trackers", {})
    ml, tb = tr.get("mlflow", {}), tr.get("tensorboard", {})
    return {"tokens_per_s": summary["tokens_per_s"], "process_s": round(wall, 3),
            "log_steps": summary.get("steps", s["steps"]),
            "tracker_thread_s": ml.get("trainer_thread_s", 0) + tb.get("trainer_thread_s", 0),
            "server_cpu_s": round(group_cpu_s(server_pgid) - cpu0, 3),
            "mlflow_sent": ml.get("sent"), "mlflow_dropped": ml.get("dropped")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frugal")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--shapes", default="tiny,mid")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.shapes = 2, "tiny"
    frugal = frugal_binary(a.frugal)
    t_start = time.time()
    shapes = a.shapes.split(",")
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        server, uri = start_mlflow(tmp)
        try:
            for shape in shapes:
                k = iter(range(10**6))
                fns = [lambda side=side: train_once(frugal, tmp, shape, side, uri, server.pid, next(k)) for side in SIDES]
                res = alternate(a.rounds, fns)
                row = {"shape": shape, **{f"{x}_config": v for x, v in SHAPES[shape].items()}}
                base = median([r["tokens_per_s"] for r in res[0]])
                for side, rs in zip(SIDES, res):
                    tps = median([r["tokens_per_s"] for r in rs])
                    row[side] = {"runs": rs, "median_tokens_per_s": tps,
                                 "median_process_s": median([r["process_s"] for r in rs]),
                                 "throughput_vs_off": tps / base,
                                 # Each round's own ratio to that round's run without trackers:
                                 # pairs taken minutes apart share less of the machine's drift.
                                 "median_paired_ratio": median([r["tokens_per_s"] / o["tokens_per_s"]
                                                                for r, o in zip(rs, res[0])]),
                                 "median_tracker_us_per_log_step":
                                     median([1e6 * r["tracker_thread_s"] / r["log_steps"] for r in rs]),
                                 "median_server_cpu_s": median([r["server_cpu_s"] for r in rs]),
                                 "median_wall_s": median([r["process_s"] for r in rs])}
                    print(f"{shape:5s} {side:12s} {tps:10.0f} tokens/s  {tps / base:6.3f}x off  "
                          f"(paired {row[side]['median_paired_ratio']:.3f}x)  "
                          f"trainer thread {row[side]['median_tracker_us_per_log_step']:.0f} us/log step  "
                          f"server CPU {row[side]['median_server_cpu_s']:.2f} s  "
                          f"process {row[side]['median_process_s']:.2f} s", flush=True)
                table.append(row)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait()
    common = common_fields("tracker_overhead", a.quick, a.rounds)
    path = save_result(results_dir(quick=a.quick), common, {"log_every": 1, "sides": list(SIDES), "table": table},
                       t_start)
    print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    sys.exit(main())

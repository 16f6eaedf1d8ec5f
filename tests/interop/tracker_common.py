"""What the tracker checks (tensorboard_check.py, mlflow_check.py) share: a tiny run of the demo
task, its metrics.jsonl as the trackers should show it, and a SIGKILL in the middle of a
checkpoint write (FRUGAL_FAULT_KILL_AT), which leaves logged steps past the newest checkpoint."""
import json
import os
import subprocess

TINY = ["run.threads=1", "model.layers=1", "model.heads=2", "model.embd=32", "model.block=16",
        "data.micro_batch=4", "data.arith_lines=2000", "train.warmup_steps=5", "train.log_every=1",
        "train.eval_every=10", "train.eval_batches=2", "train.answer_samples=0", "checkpoint.every_steps=10",
        "checkpoint.every_minutes=0"]


def sets(extra):
    return [x for s in TINY + extra for x in ("--set", s)]


def train(check, frugal, extra, resume=False, kill_at=None, expect=0):
    """`frugal train` on the demo task; kill_at=N: SIGKILL in this session's Nth checkpoint write
    (before any of it is on disk), so the steps since the previous checkpoint are logged but lost."""
    env = dict(os.environ)
    env.pop("FRUGAL_FAULT_KILL_AT", None)
    if kill_at:
        env["FRUGAL_FAULT_KILL_AT"] = f"temp_dir:{kill_at}"
    args = [frugal, "train", "--quiet"] + (["--resume", "auto"] if resume else []) + sets(extra)
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    want = -9 if kill_at else expect
    if p.returncode != want:
        check.fail(f"{' '.join(args[:4])}... exited {p.returncode}, expected {want}:\n{p.stdout[-2000:]}\n"
                   f"{p.stderr[-2000:]}")
    return p


def expected_points(metrics_path):
    """{tag: [(step, value), ...]} in file order, as include/frugal/monitor/trackers.h maps a
    metrics.jsonl line: train/<key>, user/<name>, eval/<key>, task/<name>; a null is no point."""
    out = {}
    with open(metrics_path) as f:
        for line in f:
            j = json.loads(line)
            own = "eval/" if j["event"] == "eval" else "train/"
            for k, v in j.items():
                if k in ("event", "step", "total_steps"):
                    continue
                if isinstance(v, dict):
                    group = "user/" if k == "user" else "task/"
                    for name, x in v.items():
                        if x is not None:
                            out.setdefault(group + name, []).append((j["step"], x))
                elif isinstance(v, (int, float)) and not isinstance(v, bool):
                    out.setdefault(own + k, []).append((j["step"], v))
    return out

#!/usr/bin/env python3
"""TensorBoard's own reader on a frugal run's event files ([track] tensorboard = true).

A run killed twice mid-checkpoint (so that each time steps past its newest checkpoint were logged
and are logged again after the resume) and resumed to the end: TensorBoard's EventAccumulator
reads every scalar of metrics.jsonl with the same steps (none twice, none missing) and the same
values (as float32: TensorBoard's simple_value), and the config and levers as text. The raw
files do hold the re-logged steps twice: the reader drops them because each session marks
where it starts (a SessionLog START), not because they were never written.

Usage: tensorboard_check.py FRUGAL_BINARY. Exit 77 (skipped) without the tensorboard package.
"""
import os
import socket
import subprocess
import sys
import tempfile

from interop_common import Check
from tracker_common import expected_points, sets, train

CHECK = Check("tensorboard_check")
fail = CHECK.fail

try:
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    print(f"skipped: the tensorboard package is not importable ({e}); scripts/install-deps.sh installs it")
    sys.exit(77)


def accumulate(tb_dir, purge):
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0, "tensors": 0}, purge_orphaned_data=purge)
    acc.Reload()
    return acc


def same_points(acc, want):
    """Fails unless TensorBoard's scalars are metrics.jsonl's, step for step (as float32)."""
    tags = set(acc.Tags()["scalars"])
    if tags != set(want):
        fail(f"scalar tags differ from metrics.jsonl's: only in TensorBoard {sorted(tags - set(want))}, "
             f"only in metrics.jsonl {sorted(set(want) - tags)}")
    for tag, points in want.items():
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        exp = [(s, float(np.float32(v))) for s, v in points]
        if got != exp:
            steps = [s for s, _ in got]
            fail(f"{tag}: TensorBoard has {len(got)} points (steps {steps[:5]}...{steps[-5:]}), metrics.jsonl "
                 f"{len(exp)}; first difference: "
                 f"{next(((g, e) for g, e in zip(got, exp) if g != e), 'in length')}")


def check_two_ranks(frugal, tmp):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [frugal, "launch", "-n", "2", "--port", str(port), "--", "train", "--quiet"] + \
        sets([f"run.out_dir={tmp}", "run.name=dp", "train.steps=20", "track.tensorboard=true"])
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"frugal launch -n 2 exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    tb_dir = os.path.join(tmp, "dp", "tb")
    files = [f for f in os.listdir(tb_dir) if "tfevents" in f]
    if len(files) != 1:
        fail(f"a 2-process run wrote {len(files)} event files, expected rank 0's alone: {files}")
    same_points(accumulate(tb_dir, purge=True), expected_points(os.path.join(tmp, "dp", "metrics.jsonl")))


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"run.out_dir={tmp}", "run.name=tb", "train.steps=60", "track.tensorboard=true"]
        train(CHECK, frugal, extra, kill_at=3)               # killed writing step 30's checkpoint
        train(CHECK, frugal, extra, resume=True, kill_at=2)  # from 20; killed writing step 40's
        train(CHECK, frugal, extra, resume=True)             # from 30 to the end
        train(CHECK, frugal, extra, resume=True)             # the finished run again: nothing to log
        run_dir = os.path.join(tmp, "tb")
        tb_dir = os.path.join(run_dir, "tb")
        files = sorted(f for f in os.listdir(tb_dir) if "tfevents" in f)
        if len(files) != 3:
            fail(f"expected one event file per session that logged (3), found {files}")
        want = expected_points(os.path.join(run_dir, "metrics.jsonl"))
        if "train/loss" not in want or "eval/val_loss" not in want or "train/kg_co2" not in want:
            fail(f"metrics.jsonl lacks the expected fields: {sorted(want)}")

        raw = accumulate(tb_dir, purge=False)
        raw_steps = [e.step for e in raw.Scalars("train/loss")]
        if len(raw_steps) == len(set(raw_steps)):
            fail("the kills left no re-logged steps in the event files: the check would not see a doubled step")

        acc = accumulate(tb_dir, purge=True)
        same_points(acc, want)
        texts = set(acc.Tags()["tensors"])
        if not {"config", "levers"} <= texts:
            fail(f"the config and levers texts are missing: {sorted(texts)}")
        config = acc.Tensors("config")[-1].tensor_proto.string_val[0].decode()
        levers = acc.Tensors("levers")[-1].tensor_proto.string_val[0].decode()
        if "track.tensorboard" not in config and "tensorboard = true" not in config:
            fail(f"the config text is not the resolved config.toml: {config[:300]}")
        if "precision" not in levers or "optimizer" not in levers:
            fail(f"the levers text is not the levers line: {levers}")
        check_two_ranks(frugal, tmp)
        n = sum(len(p) for p in want.values())
        print(f"tensorboard_check: ok ({len(want)} tags, {n} points over 3 sessions, "
              f"{len(raw_steps) - len(set(raw_steps))} re-logged steps dropped by the reader; 2 processes: rank 0's file "
              f"alone)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reliability bench: what a user's run survives, counted. Not a test (tests/chaos/chaos_test.sh
is the quick one in `make test`); this one runs long enough to count.

  kills     chains of runs killed with SIGKILL at random steps and resumed with --resume auto, at
            the default thread count (run.threads unset), checkpoints sync and async, beside a
            competing busy process; plus one kill after each stage of a checkpoint write. Each
            chain ends bitwise equal (final weights byte for byte, metrics.jsonl minus timing) to
            the uninterrupted run, or is counted as not.
  enospc    runs on a small tmpfs that fills up mid-run: the newest complete checkpoint left
            behind must be the one --resume auto continues from (no bad newest checkpoint).
  flood     a run with the live dashboard under 1,000 idle connections: it must go on and stop
            cleanly on SIGTERM (exit 75) with a sound checkpoint.
  sigterm   SIGTERM at random moments (start-up, steps, evaluations, checkpoint writes): the time
            from the signal to the process's exit, and its exit code.

Writes bench/results/<date>/reliability.json; docs/reliability.md's table is rendered from it
(bench/render_tables.py).

  bench/reliability.py [--kills 100] [--sigterms 20] [--load 1] [--quick]
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402

STEPS = 300
COMMON = ["--set", "model.layers=1", "--set", "model.heads=2", "--set", "model.embd=32", "--set", "model.block=16",
          "--set", "model.dropout=0.1", "--set", "data.micro_batch=4", "--set", "data.arith_lines=2000",
          "--set", f"train.steps={STEPS}", "--set", "train.warmup_steps=10", "--set", "train.eval_every=25",
          "--set", "train.eval_batches=2", "--set", "train.log_every=5", "--set", "train.answer_samples=0",
          "--set", "checkpoint.every_steps=7", "--set", "checkpoint.every_minutes=0", "--set", "checkpoint.keep_last=2",
          "--set", "precision.mode=fp32"]
TIMING = re.compile(r',"(tokens_per_s|step_s|elapsed_s|eval_s|data_s|forward_s|backward_s|optimizer_s|data_wait_s|'
                    r'rss_mb|cost_usd|energy_kwh|kg_co2|samples_per_s|mfu|checkpoint_s)":[^,}]*')
STAGES = ["temp_dir", "model", "master", "optimizer", "data_state", "state", "renamed", "marker"]


def last_step(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        m = re.search(rb'"step":(\d+)', line)
        if m:
            return int(m.group(1))
    return 0


def metrics_without_timing(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [TIMING.sub("", line) for line in f]


def same_run(ref, run):
    with open(os.path.join(ref, "final", "model.safetensors"), "rb") as a, \
            open(os.path.join(run, "final", "model.safetensors"), "rb") as b:
        if a.read() != b.read():
            return False
    return metrics_without_timing(ref) == metrics_without_timing(run)


class Load:
    """Busy processes beside the runs (a shared machine's neighbours)."""

    def __init__(self, n):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


def kill_chain(frugal, out, extra, kills, rng, ref):
    """Trains `out` with `kills` SIGKILLs at random steps, resuming each time; True when it ends
    bitwise equal to `ref`."""
    run_dir = os.path.join(out, "demo")
    args = [frugal, "train", "-q", "--resume", "auto"] + COMMON + extra + ["--set", f"run.out_dir={out}"]
    span = STEPS // (kills + 1)
    done = 0
    while done < kills:
        target = last_step(run_dir) + 1 + rng.randrange(span)
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while p.poll() is None and last_step(run_dir) < target:
            time.sleep(0.01)
        if p.poll() is not None:
            raise SystemExit(f"reliability: a run finished after {done} of {kills} kills; raise STEPS")
        p.send_signal(signal.SIGKILL)
        p.wait()
        done += 1
    bc.run(args, "the final resume")
    return same_run(ref, run_dir)


def write_kill_chain(frugal, out, ref):
    """One kill after each stage of a checkpoint write (sync and async alternately), each followed by
    --resume auto; True when the end is bitwise the uninterrupted run."""
    for i, stage in enumerate(STAGES):
        env = bc.environment({"FRUGAL_FAULT_KILL_AT": f"{stage}:2"})
        p = subprocess.run([frugal, "train", "-q", "--resume", "auto"] + COMMON +
                           ["--set", f"checkpoint.async={'true' if i % 2 else 'false'}", "--set", f"run.out_dir={out}"],
                           env=env, capture_output=True, text=True)
        if p.returncode != -signal.SIGKILL:
            raise SystemExit(f"reliability: the run to be killed after stage {stage} exited {p.returncode}")
    bc.run([frugal, "train", "-q", "--resume", "auto"] + COMMON + ["--set", f"run.out_dir={out}"], "the final resume")
    return same_run(ref, os.path.join(out, "demo"))


def bench_kills(frugal, work, total, load, seed):
    rng = random.Random(seed)
    per_chain = 10
    refs = {}
    for mode in ("sync", "async"):
        ref = os.path.join(work, f"ref-{mode}")
        bc.run([frugal, "train", "-q"] + COMMON + ["--set", f"checkpoint.async={mode == 'async'}".lower(),
                                                  "--set", f"run.out_dir={ref}"], "the uninterrupted run")
        refs[mode] = os.path.join(ref, "demo")
    busy = Load(load)
    chains = []
    try:
        kills = 0
        i = 0
        while kills < total:
            mode = ("sync", "async")[i % 2]
            n = min(per_chain, total - kills)
            out = os.path.join(work, f"chain-{i}")
            t0 = time.time()
            ok = kill_chain(frugal, out, ["--set", f"checkpoint.async={'true' if mode == 'async' else 'false'}"], n, rng,
                            refs[mode])
            chains.append({"mode": mode, "kills": n, "bitwise": ok, "seconds": round(time.time() - t0, 1)})
            print(f"reliability: kills: chain {i} ({mode}): {n} kills, {'bitwise' if ok else 'NOT bitwise'}", flush=True)
            kills += n
            i += 1
        t0 = time.time()
        ok = write_kill_chain(frugal, os.path.join(work, "stages"), refs["sync"])
        chains.append({"mode": "inside writes", "kills": len(STAGES), "bitwise": ok, "seconds": round(time.time() - t0, 1)})
        print(f"reliability: kills: inside each write stage: {'bitwise' if ok else 'NOT bitwise'}", flush=True)
    finally:
        busy.stop()
    return {"chains": chains, "kills": sum(c["kills"] for c in chains),
            "bitwise_chains": sum(c["bitwise"] for c in chains), "of_chains": len(chains),
            "threads": "default (run.threads unset)", "competing_busy_processes": load, "steps": STEPS}


def newest_complete(ck_root):
    steps = []
    for d in glob.glob(os.path.join(ck_root, "step-*")):
        if os.path.isfile(os.path.join(d, "COMPLETE")):
            steps.append(int(os.path.basename(d)[5:]))
    return max(steps) if steps else None


def bench_enospc(frugal, work, runs):
    if os.geteuid() != 0:
        return {"skipped": "needs root to mount a small tmpfs"}
    results = []
    for i in range(runs):
        mnt = os.path.join(work, f"tmpfs-{i}")
        os.makedirs(mnt)
        size_kb = 700 + 70 * i  # a few checkpoints fit, then the disk fills at a different moment each time
        m = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", mnt], capture_output=True, text=True)
        if m.returncode != 0:
            return {"skipped": f"cannot mount a tmpfs here: {m.stderr.strip()}"}
        try:
            p = subprocess.run([frugal, "train", "-q"] + COMMON + ["--set", "checkpoint.every_steps=5",
                                                                  "--set", "checkpoint.keep_last=3",
                                                                  "--set", f"run.out_dir={mnt}"],
                               capture_output=True, text=True)
            copy = os.path.join(work, f"enospc-copy-{i}")
            shutil.copytree(mnt, copy)
        finally:
            subprocess.run(["umount", mnt])
        ck_root = os.path.join(copy, "demo", "checkpoints")
        newest = newest_complete(ck_root)
        full = "No space left on device" in p.stderr or "No space" in p.stderr
        entry = {"tmpfs_kb": size_kb, "exit": p.returncode, "disk_filled": full, "newest_complete_step": newest}
        if newest is not None:
            r = subprocess.run([frugal, "train", "--resume", "auto"] + COMMON +
                               ["--set", f"run.out_dir={copy}", "--stop-at-step", str(newest + 1)],
                               capture_output=True, text=True)
            m2 = re.search(r"resume: continuing from .*step-(\d+)", r.stdout + r.stderr)
            entry["resumed_from_step"] = int(m2.group(1)) if m2 else None
            entry["newest_sound"] = entry["resumed_from_step"] == newest
        else:
            entry["newest_sound"] = True  # nothing complete: nothing bad either
        results.append(entry)
        print(f"reliability: enospc: {size_kb} kB, exit {p.returncode}, newest complete step {newest}, "
              f"{'sound' if entry['newest_sound'] else 'BAD'}", flush=True)
    return {"runs": results, "disk_filled": sum(r["disk_filled"] for r in results),
            "bad_newest": sum(not r["newest_sound"] for r in results)}


def bench_flood(frugal, work, connections):
    out = os.path.join(work, "flood")
    p = subprocess.Popen([frugal, "train"] + COMMON + ["--set", "train.steps=100000", "--set", f"run.out_dir={out}",
                                                      "--set", "monitor.http=127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    t0 = time.time()
    lines = []
    while port is None and time.time() - t0 < 60:
        line = p.stdout.readline()
        lines.append(line)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        p.kill()
        return {"skipped": "the run printed no dashboard address: " + "".join(lines[-5:])}
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, connections + 64)), hard))
    run_dir = os.path.join(out, "demo")
    t0 = time.time()
    while last_step(run_dir) == 0 and time.time() - t0 < 60:  # training, not start-up, is what is compared
        time.sleep(0.05)
    window = 3.0
    a = last_step(run_dir)
    time.sleep(window)
    quiet_steps = last_step(run_dir) - a
    socks = []
    for _ in range(connections):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            socks.append(s)
        except OSError:
            break
    before = last_step(run_dir)
    time.sleep(window)
    after = last_step(run_dir)
    t = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
    exit_s = time.time() - t
    for s in socks:
        s.close()
    return {"connections_open": len(socks), "window_s": window, "steps_before_flood": quiet_steps,
            "steps_during_flood": after - before, "exit": p.returncode, "sigterm_to_exit_s": round(exit_s, 3)}


def bench_sigterm(frugal, work, n, rng):
    samples = []
    for i in range(n):
        out = os.path.join(work, f"term-{i}")
        delay = rng.uniform(0.0, 2.5)
        p = subprocess.Popen([frugal, "train", "-q"] + COMMON + ["--set", "train.steps=100000",
                                                                "--set", f"checkpoint.async={'true' if i % 2 else 'false'}",
                                                                "--set", f"run.out_dir={out}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        t = time.time()
        p.send_signal(signal.SIGTERM)
        p.wait()
        samples.append({"delay_s": round(delay, 3), "exit": p.returncode, "sigterm_to_exit_s": round(time.time() - t, 3),
                        "steps": last_step(os.path.join(out, "demo"))})
        print(f"reliability: sigterm at {delay:.2f} s: exit {p.returncode} after {samples[-1]['sigterm_to_exit_s']:.3f} s",
              flush=True)
    return {"samples": samples, "max_sigterm_to_exit_s": max(s["sigterm_to_exit_s"] for s in samples),
            "exit_codes": sorted({s["exit"] for s in samples})}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=100, help="random SIGKILLs in all (chains of 10), besides the 8 "
                                                           "inside checkpoint writes")
    ap.add_argument("--sigterms", type=int, default=20)
    ap.add_argument("--enospc", type=int, default=10, help="runs on a filling tmpfs")
    ap.add_argument("--flood", type=int, default=1000, help="idle dashboard connections")
    ap.add_argument("--load", type=int, default=1, help="competing busy processes beside the killed runs")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--frugal", default=None)
    ap.add_argument("--quick", action="store_true", help="20 kills, 4 SIGTERMs, 2 tmpfs runs, 200 connections")
    ap.add_argument("--only", default=None, help="measure only these parts (comma-separated: kills, enospc, flood, "
                                                 "sigterm) and keep the others from this day's reliability.json")
    a = ap.parse_args()
    if a.quick:
        a.kills, a.sigterms, a.enospc, a.flood = 20, 4, 2, 200
    frugal = os.path.abspath(bc.frugal_binary(a.frugal))
    seed = a.seed if a.seed is not None else int(time.time()) % 32768
    rng = random.Random(seed)
    t_start = time.time()
    common = bc.common_fields("reliability", a.quick, 1)
    work = tempfile.mkdtemp(prefix="frugal-reliability-")
    env_cache = tempfile.mkdtemp(prefix="frugal-reliability-cache-")
    os.environ["FRUGAL_CACHE_DIR"] = env_cache  # the machine's own kept thread choice is not consulted
    try:
        res = {"seed": seed}
        parts = {"kills": lambda: bench_kills(frugal, work, a.kills, a.load, seed),
                 "enospc": lambda: bench_enospc(frugal, work, a.enospc),
                 "flood": lambda: bench_flood(frugal, work, a.flood),
                 "sigterm": lambda: bench_sigterm(frugal, work, a.sigterms, rng)}
        only = a.only.split(",") if a.only else list(parts)
        earlier = os.path.join(bc.results_dir(quick=a.quick), "reliability.json")
        if set(only) != set(parts):
            with open(earlier) as f:
                kept = json.load(f)
            res.update({k: kept[k] for k in parts if k not in only})
            res["parts_from_earlier"] = {k: kept.get("source") for k in parts if k not in only}
        for name in only:
            res[name] = parts[name]()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(env_cache, ignore_errors=True)
    path = bc.save_result(bc.results_dir(quick=a.quick), common, res, t_start)
    k = res["kills"]
    print(f"reliability: {k['kills']} kills in {k['of_chains']} chains, {k['bitwise_chains']} bitwise; "
          f"enospc bad newest {res['enospc'].get('bad_newest', 'skipped')}; flood exit {res['flood'].get('exit')}; "
          f"worst SIGTERM-to-exit {res['sigterm']['max_sigterm_to_exit_s']:.3f} s; wrote {bc.shown(path)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A real `mlflow server` (loopback, a temporary SQLite store) as a frugal run's tracker
([track] mlflow_uri), read back with mlflow.MlflowClient.

1. A run killed (SIGKILL) once the server holds steps past its newest checkpoint, and resumed
   with --resume auto, is one MLflow run: params are the resolved config, every metric's history holds every
   step of metrics.jsonl with the same value (a re-sent step's newest point counts), the tag
   frugal.resumes names the resume, summary.json, report.html and config.toml are artifacts, the
   status is FINISHED, and the run directory's mlflow.json holds no credentials.
2. A data-parallel run of 2 processes is one MLflow run (rank 0's), with metrics.jsonl's figures,
   and with track.mlflow_weights its final weights as an artifact, byte for byte.
3. The server stopped in the middle of a run: training completes with exit 0, warns, and
   summary.json counts the points that were not sent.
4. A server with MLflow's basic-auth app: without credentials the run completes (exit 0) and the
   warning names the variables to set; with MLFLOW_TRACKING_USERNAME / _PASSWORD the metrics
   arrive, and the password is written nowhere in the run directory.

Usage: mlflow_check.py FRUGAL_BINARY (run with a Python that has mlflow: .venv-mlflow, made by
scripts/install-deps.sh). Exit 77 (skipped) without mlflow.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from interop_common import Check
from tracker_common import expected_points, sets, train

CHECK = Check("mlflow_check")
fail = CHECK.fail

try:
    from mlflow.tracking import MlflowClient
except ImportError as e:
    print(f"skipped: mlflow is not importable by {sys.executable} ({e}); scripts/install-deps.sh makes .venv-mlflow")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


AUTH_PASSWORD = "frugal-check-admin-pass"


def start_server(tmp, auth=False):
    """`mlflow server` on a free loopback port with its store in `tmp`; auth: MLflow's basic-auth
    app, with the user admin / AUTH_PASSWORD."""
    os.makedirs(tmp, exist_ok=True)
    port = free_port()
    mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
    log = open(os.path.join(tmp, "server.log"), "w")
    p = subprocess.Popen([mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                          "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db",
                          "--artifacts-destination", f"{tmp}/artifacts"] +
                         (["--app-name", "basic-auth"] if auth else []), cwd=tmp,
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
                                  MLFLOW_AUTH_ADMIN_PASSWORD=AUTH_PASSWORD, MLFLOW_FLASK_SERVER_SECRET_KEY="frugal-check"))
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if p.poll() is not None:
            fail(f"mlflow server exited {p.returncode}: {open(log.name).read()[-2000:]}")
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                if r.status == 200:
                    return p, uri
        except urllib.error.HTTPError as e:  # basic-auth answers /health with 401 once it is up
            if e.code == 401:
                return p, uri
            time.sleep(0.5)
        except OSError:
            time.sleep(0.5)
    fail("mlflow server did not start within 180 s")


def stop_server(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def newest_checkpoint(run_dir):
    d = os.path.join(run_dir, "checkpoints")
    steps = [int(n[5:]) for n in os.listdir(d) if re.fullmatch(r"step-\d{8}", n)] if os.path.isdir(d) else []
    return max(steps, default=0)


def kill_past_a_checkpoint(p, run_dir, client):
    """SIGKILLs the run once the server holds steps past its newest checkpoint (checked with the
    run held still by SIGSTOP), so that the resume sends those steps again."""
    deadline = time.time() + 300
    while time.time() < deadline:
        if p.poll() is not None:
            fail(f"the run ended (exit {p.returncode}) before it could be killed past a checkpoint")
        kept = os.path.join(run_dir, "mlflow.json")
        if os.path.exists(kept) and newest_checkpoint(run_dir) > 0:
            run_id = json.load(open(kept))["run_id"]
            p.send_signal(signal.SIGSTOP)
            ckpt = newest_checkpoint(run_dir)
            sent = max((m.step for m in client.get_metric_history(run_id, "train/loss")), default=0)
            if sent > ckpt:
                p.kill()
                p.wait()
                return ckpt, sent
            p.send_signal(signal.SIGCONT)
        time.sleep(0.1)
    fail("the server never held steps past a checkpoint within 300 s")


def check_resumed_run(frugal, tmp, uri):
    # A model big enough (a step of several ms) that the sender keeps up with the steps.
    extra = [f"run.out_dir={tmp}", "run.name=resumed", "model.layers=2", "model.embd=128", "model.block=64",
             "data.micro_batch=8", "train.steps=800", "train.log_every=5", "checkpoint.every_steps=200",
             f"track.mlflow_uri={uri}", "track.mlflow_experiment=frugal-check",
             "track.mlflow_timeout_s=60"]
    client = MlflowClient(tracking_uri=uri)
    first = subprocess.Popen([frugal, "train", "--quiet"] + sets(extra), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    ckpt, sent = kill_past_a_checkpoint(first, os.path.join(tmp, "resumed"), client)
    train(CHECK, frugal, extra, resume=True)
    run_dir = os.path.join(tmp, "resumed")
    kept = json.load(open(os.path.join(run_dir, "mlflow.json")))
    expected_keys = {"uri", "experiment", "experiment_id", "run_id", "run_dir", "sent_through_step"}
    if (set(kept) != expected_keys or kept["uri"] != uri or kept["experiment"] != "frugal-check"
            or kept["run_dir"] != os.path.realpath(run_dir) or kept["sent_through_step"] != 800):
        fail(f"mlflow.json: {kept}")
    exp = client.get_experiment_by_name("frugal-check")
    runs = client.search_runs([exp.experiment_id])
    if len(runs) != 1 or runs[0].info.run_id != kept["run_id"]:
        fail(f"expected one MLflow run ({kept['run_id']}), found {[r.info.run_id for r in runs]}")
    run = runs[0]
    if run.info.status != "FINISHED":
        fail(f"the run's status is {run.info.status}, expected FINISHED")
    if run.data.params.get("train.steps") != "800" or run.data.params.get("model.embd") != "128":
        fail(f"params are not the resolved config: train.steps={run.data.params.get('train.steps')}")
    resumes = run.data.tags.get("frugal.resumes", "")
    if not re.fullmatch(r"\d+@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", resumes) or int(resumes.split("@")[0]) > ckpt:
        fail(f"tag frugal.resumes: {resumes!r}, expected one resume at step {ckpt} or before")
    if "precision" not in run.data.tags.get("frugal.levers", ""):
        fail(f"tag frugal.levers: {run.data.tags.get('frugal.levers')!r}")
    tags, points, resent = same_history(client, run.info.run_id, os.path.join(run_dir, "metrics.jsonl"))
    if resent == 0:
        fail("no step was sent twice: the kill did not leave sent steps past the checkpoint")
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    if not {"summary.json", "report.html", "config.toml"} <= artifacts:
        fail(f"artifacts: {sorted(artifacts)}")
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    s = summary["trackers"]["mlflow"]
    if s["dropped"] != 0 or s["sent"] <= 0 or s["run_id"] != kept["run_id"]:
        fail(f"summary.json trackers.mlflow: {s}")
    return tags, points, resent, (ckpt, sent)


def same_history(client, run_id, metrics_path):
    """Fails unless every metric's history holds metrics.jsonl's steps and values (a step sent
    twice counts with its newest point); returns (tags, points, points sent twice)."""
    want = expected_points(metrics_path)
    resent = 0
    for tag, points in want.items():
        history = client.get_metric_history(run_id, tag)
        newest = {}
        for m in sorted(history, key=lambda m: m.timestamp):
            newest[m.step] = m.value
        resent += len(history) - len(newest)
        got, exp = sorted(newest.items()), sorted(points)
        if got != exp:
            fail(f"{tag}: MLflow has {len(got)} steps, metrics.jsonl {len(exp)}; first difference "
                 f"{next(((g, e) for g, e in zip(got, exp) if g != e), 'in length')}")
    return len(want), sum(len(p) for p in want.values()), resent


def check_two_ranks(frugal, tmp, uri):
    args = [frugal, "launch", "-n", "2", "--port", str(free_port()), "--", "train", "--quiet"] + \
        sets([f"run.out_dir={tmp}", "run.name=dp", "train.steps=20", f"track.mlflow_uri={uri}",
              "track.mlflow_experiment=frugal-dp", "track.mlflow_weights=true"])
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"frugal launch -n 2 exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("frugal-dp").experiment_id])
    if len(runs) != 1:
        fail(f"a 2-process run made {len(runs)} MLflow runs, expected rank 0's alone")
    same_history(client, runs[0].info.run_id, os.path.join(tmp, "dp", "metrics.jsonl"))
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    if "model.safetensors" not in artifacts:
        fail(f"track.mlflow_weights = true sent no final weights: {sorted(artifacts)}")
    local = client.download_artifacts(runs[0].info.run_id, "model.safetensors", tmp)
    if open(local, "rb").read() != open(os.path.join(tmp, "dp", "final", "model.safetensors"), "rb").read():
        fail("the weights artifact differs from final/model.safetensors")


def check_server_stopped(frugal, tmp, server):
    uri = server[1]
    run_dir = os.path.join(tmp, "outage")
    args = [frugal, "train"] + sets([f"run.out_dir={tmp}", "run.name=outage", "model.layers=2", "model.embd=128",
                                     "model.block=64", "data.micro_batch=8", "train.steps=600",
                                     "checkpoint.every_steps=300", f"track.mlflow_uri={uri}",
                                     "track.mlflow_timeout_s=2"])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = MlflowClient(tracking_uri=uri)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:  # until the server holds some of its points
        kept = os.path.join(run_dir, "mlflow.json")
        if os.path.exists(kept) and len(client.get_metric_history(json.load(open(kept))["run_id"], "train/loss")) >= 5:
            break
        time.sleep(0.1)
    # Held still while the server goes, so that the run has steps left after it (on any machine).
    p.send_signal(signal.SIGSTOP)
    stop_server(server[0])
    p.send_signal(signal.SIGCONT)
    out, _ = p.communicate(timeout=600)
    if p.returncode != 0:
        fail(f"training with the server stopped exited {p.returncode}:\n{out[-2000:]}")
    if "warning: mlflow" not in out:
        fail(f"no warning about the server:\n{out[-2000:]}")
    s = json.load(open(os.path.join(run_dir, "summary.json")))["trackers"]["mlflow"]
    if s["dropped"] <= 0 or s["sent"] <= 0:
        fail(f"summary.json trackers.mlflow: {s}; expected points sent before the stop and dropped after it")
    return s


def check_credentials(frugal, tmp):
    """A server that wants credentials: without them the run still completes (exit 0) and says
    which variables to set; with MLFLOW_TRACKING_USERNAME / _PASSWORD its metrics arrive, and the
    password is written nowhere in the run directory."""
    server = start_server(os.path.join(tmp, "auth-server"), auth=True)
    try:
        uri = server[1]
        extra = [f"run.out_dir={tmp}", "train.steps=20", f"track.mlflow_uri={uri}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
        p = subprocess.run([frugal, "train"] + sets(extra + ["run.name=noauth"]), capture_output=True, text=True,
                           env=env)
        if p.returncode != 0 or "HTTP 401" not in p.stdout or "MLFLOW_TRACKING_USERNAME" not in p.stdout:
            fail(f"without credentials: exit {p.returncode}, expected 0 and a warning naming the variables:\n"
                 f"{p.stdout[-1500:]}")
        env.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=AUTH_PASSWORD)
        p = subprocess.run([frugal, "train", "--quiet"] + sets(extra + ["run.name=auth"]), capture_output=True,
                           text=True, env=env)
        if p.returncode != 0:
            fail(f"with credentials: exit {p.returncode}:\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
        s = json.load(open(os.path.join(tmp, "auth", "summary.json")))["trackers"]["mlflow"]
        if s["sent"] <= 0 or s["dropped"] != 0:
            fail(f"with credentials: summary.json trackers.mlflow: {s}")
        for root, _, names in os.walk(os.path.join(tmp, "auth")):
            for n in names:
                if AUTH_PASSWORD.encode() in open(os.path.join(root, n), "rb").read():
                    fail(f"the password was written to {os.path.join(root, n)}")
        os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = "admin", AUTH_PASSWORD
        same_history(MlflowClient(tracking_uri=uri), s["run_id"], os.path.join(tmp, "auth", "metrics.jsonl"))
        return s["sent"]
    finally:
        stop_server(server[0])


def main():
    frugal = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(tmp)
        try:
            tags, points, resent, (ckpt, sent) = check_resumed_run(frugal, tmp, server[1])
            check_two_ranks(frugal, tmp, server[1])
            outage = check_server_stopped(frugal, tmp, server)
        finally:
            stop_server(server[0])
        auth_sent = check_credentials(frugal, tmp)
        print(f"mlflow_check: ok (one run over a kill at step {sent}, past the checkpoint at {ckpt}, and a resume: "
              f"{tags} metrics, {points} points, {resent} re-sent; 2 processes: one run, its weights artifact byte-equal; server stopped mid-run: exit 0, {outage['sent']} sent, {outage['dropped']} counted as "
              f"dropped; a server with basic auth: refused without credentials (exit 0), {auth_sent} points with them, "
              f"the password nowhere in the run directory)")


if __name__ == "__main__":
    main()

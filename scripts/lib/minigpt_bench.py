"""Shared parts of the minigpt benchmark scripts (scripts/record-table, scripts/bench-patches): preset files,
patched builds cached by patch content, and one-at-a-time Slurm runs with their outcome, step time, peak
memory and cost; and how a recorded table (tests/bench/tables/README.md) names and times a configuration."""
import datetime
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINIGPT = os.path.join(REPO, "workloads", "minigpt")


def config_key(c):
    """A table configuration's identity: its knobs and its sorted patches."""
    return json.dumps({"knobs": c["knobs"], "patches": sorted(c["patches"])}, sort_keys=True)


def reference_step_s(row):
    """The table's reference time of a configuration (README: the median of its successful repeats, when more
    than half ran), or None."""
    ok = [r["step_time_s"] for r in row["repeats"] if r["outcome"] == "ok"]
    return statistics.median(ok) if len(ok) * 2 > len(row["repeats"]) else None


def read_env(path):
    env = {}
    for line in open(path):
        m = re.match(r"^(MINIGPT_[A-Z0-9_]+)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2)
    return env


def slurm_args(path):
    for line in open(path):
        if line.startswith("# slurm: "):
            return line[len("# slurm: "):].split()
    return []


def build(patches, work, log):
    """A minigpt binary with `patches` applied (in the given order), cached by the content of the baseline
    source and of the patch set. Raises RuntimeError naming the build log when it does not build."""
    digest = hashlib.sha256()
    for base, _, files in sorted(os.walk(os.path.join(MINIGPT, "src"))):
        for name in sorted(files):
            digest.update(name.encode() + open(os.path.join(base, name), "rb").read())
    digest.update(open(os.path.join(MINIGPT, "CMakeLists.txt"), "rb").read())
    for p in patches:
        digest.update(open(os.path.join(MINIGPT, "patches", p + ".patch"), "rb").read())
    tag = "base" if not patches else "+".join(patches)
    root = os.path.join(work, "builds", tag + "-" + digest.hexdigest()[:12])
    binary = os.path.join(root, "build", "minigpt")
    if os.path.exists(binary):
        return binary
    log(f"building {tag} in {root}")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(MINIGPT, os.path.join(root, "src"), ignore=shutil.ignore_patterns("build", "tests"))
    for p in patches:
        with open(os.path.join(MINIGPT, "patches", p + ".patch")) as f:
            subprocess.run(["patch", "-p1", "-s", "-d", os.path.join(root, "src")], stdin=f, check=True)
    build_log = os.path.join(root, "build.log")
    with open(build_log, "w") as out:
        for step in (["cmake", "-S", os.path.join(root, "src"), "-B", os.path.join(root, "build"),
                      "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF"],
                     ["cmake", "--build", os.path.join(root, "build"), "--target", "minigpt", "-j2"]):
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise RuntimeError(f"building {tag} failed: {' '.join(step)} (log: {build_log})")
    return binary


def estimate(binary, env):
    out = subprocess.run([binary, "--estimate-memory"], env=env, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["estimated_peak_bytes"])


def scontrol_job(job_id):
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def infrarsi():
    """The product's command: its `trial classify` labels every run as a campaign labels a trial."""
    build_dir = os.environ.get("INFRARSI_BUILD_DIR") or os.path.join(REPO, "build")
    path = os.environ.get("INFRARSI_BIN") or os.path.join(build_dir, "orchestrator", "infrarsi")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no infrarsi command at {path} (build it, or set INFRARSI_BIN)")
    return path


def classify(job_id, out_path, steps, mem):
    """`infrarsi trial classify`: the outcome (ok, oom, timeout, crash, ...) as trial::classify decides it."""
    cmd = [infrarsi(), "trial", "classify", "--job", job_id, "--output", out_path, "--steps", str(steps)]
    if mem:
        cmd += ["--mem", mem]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def wait_for_job(job_id):
    """Polls scontrol until the job has ended; returns its record and the allocation time it was billed
    (EndTime - StartTime, whole seconds; NaN when Slurm gives no times)."""
    terminal = {"COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED"}
    while True:
        info = scontrol_job(job_id)
        if info.get("JobState") in terminal:
            break
        time.sleep(0.3)
    fmt = "%Y-%m-%dT%H:%M:%S"
    try:
        cost = (datetime.datetime.strptime(info["EndTime"], fmt) -
                datetime.datetime.strptime(info["StartTime"], fmt)).total_seconds()
    except (KeyError, ValueError):
        cost = float("nan")
    return info, cost


def run_once(binary, env, args, out_path):
    """One trial as a Slurm batch job; waits for it with a short poll (sbatch --wait polls every 10 s)."""
    job_id = subprocess.run(["sbatch", "--parsable", *args, "-o", out_path,
                             os.path.join(REPO, "sbatch", "minigpt.sbatch")],
                            env=dict(env, MINIGPT_BIN=binary), check=True, capture_output=True,
                            text=True).stdout.strip().split(";")[0]
    info, cost = wait_for_job(job_id)
    text = open(out_path, errors="replace").read() if os.path.exists(out_path) else ""
    summary = None
    for line in text.splitlines():
        if line.startswith("INFRARSI_SUMMARY "):
            summary = json.loads(line.split(" ", 1)[1])
    state = info.get("JobState", "UNKNOWN")
    mem = next((a.split("=", 1)[1] for a in args if a.startswith("--mem=")), "")
    verdict = classify(job_id, out_path, int(env.get("MINIGPT_STEPS", "0")), mem)
    if verdict["outcome"] == "ok" and summary:
        return {"outcome": "ok", "step_time_s": round(summary["median_step_time_s"], 5),
                "peak_bytes": float(summary["peak_rss_node_bytes"]), "cost_s": cost}
    if verdict["outcome"] == "oom":
        return {"outcome": "oom", "cost_s": cost}
    return {"outcome": "failed", "cost_s": cost, "state": state, "classified": verdict["outcome"],
            "detail": verdict["detail"]}

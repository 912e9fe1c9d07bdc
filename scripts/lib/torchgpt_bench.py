"""torchgpt runs for scripts/record-table: one configuration of workloads/torchgpt as the user's own Slurm job
(job.sbatch under torchrun, knobs as its arguments, --ntasks-per-node and the BLAS as the job gets them), with
its outcome as the product classifies it, its steady-state step time from the job's own nanoGPT lines and the
job cgroup's memory peak (what --mem is enforced on)."""
import os
import re
import statistics
import subprocess

from minigpt_bench import REPO, classify, wait_for_job

TORCHGPT = os.path.join(REPO, "workloads", "torchgpt")
ITER = re.compile(r"^iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms")

# Run inside the job after job.sbatch: the job cgroup's peak (cgroup v1's memory.max_usage_in_bytes, v2's
# memory.peak), from the batch step's own cgroup path.
WRAPPER = r"""#!/bin/bash
bash "$TORCHGPT_JOB" "$@"
rc=$?
v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
v2=$(awk -F: '$2 == "" {print $3}' /proc/self/cgroup)
for f in "/sys/fs/cgroup/memory${v1%/step_*}/memory.max_usage_in_bytes" "/sys/fs/cgroup${v2%/step_*}/memory.peak"; do
  if [ -r "$f" ]; then echo "RECORD_JOB_PEAK_BYTES $(cat "$f")"; break; fi
done
exit $rc
"""


def settings(knobs, global_batch, cores):
    """(job arguments, environment, sbatch options) of one configuration; the global batch stays fixed and
    ranks x threads fill the node's cores."""
    ranks = int(knobs.get("ranks_per_node", "1"))
    mb = int(knobs["micro_batch"])
    args = [f"--batch_size={mb}", f"--gradient_accumulation_steps={global_batch // ranks // mb}",
            f"--threads={max(1, cores // ranks)}"]
    if "recompute" in knobs:
        args.append(f"--activation_checkpointing={knobs['recompute']}")
    if "optimizer" in knobs:
        args.append(f"--optimizer_impl={knobs['optimizer']}")
    env = {"TORCHGPT_BLAS": knobs["blas"]} if "blas" in knobs else {}
    return args, env, [f"--ntasks-per-node={ranks}", f"--cpus-per-task={max(1, cores // ranks)}"]


def valid(knobs, global_batch):
    per_rank = global_batch // int(knobs.get("ranks_per_node", "1"))
    return int(knobs["micro_batch"]) <= per_rank and per_rank % int(knobs["micro_batch"]) == 0


def run_once(knobs, fixed_args, global_batch, cores, steps, warmup, mem, time_limit, work, out_path):
    """One run as a Slurm batch job, waited for with a short poll. Returns the table's repeat record."""
    wrapper = os.path.join(work, "record-job.sh")
    if not os.path.exists(wrapper) or open(wrapper).read() != WRAPPER:
        with open(wrapper, "w") as f:
            f.write(WRAPPER)
    args, env, sbatch_opts = settings(knobs, global_batch, cores)
    job_env = dict(os.environ, TORCHGPT_JOB=os.path.join(TORCHGPT, "job.sbatch"), **env)
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", f"--mem={mem}", f"--time={time_limit}", *sbatch_opts,
         "-o", out_path, "-D", TORCHGPT, wrapper, *fixed_args, f"--max_iters={steps}", *args],
        env=job_env, check=True, capture_output=True, text=True).stdout.strip().split(";")[0]
    info, cost = wait_for_job(job_id)
    text = open(out_path, errors="replace").read() if os.path.exists(out_path) else ""
    times, peak = {}, None
    for line in text.splitlines():
        m = ITER.match(line)
        if m:
            times[int(m.group(1))] = float(m.group(3)) / 1000
        elif line.startswith("RECORD_JOB_PEAK_BYTES "):
            try:  # the job's own output: a line cut short or forged by the job is no peak
                peak = float(line.split()[1])
            except (IndexError, ValueError):
                peak = None
    timed = [times[i] for i in range(warmup, steps) if i in times]
    # The job's own lines say it ran (the product reads them in the contract's format); `trial classify`
    # says why one did not.
    if info.get("JobState") == "COMPLETED" and len(times) == steps and timed:
        rep = {"outcome": "ok", "step_time_s": round(statistics.median(timed), 5), "cost_s": cost}
        if peak:
            rep["peak_bytes"] = peak
        return rep
    verdict = classify(job_id, out_path, 0, mem)
    if verdict["outcome"] == "oom":
        return {"outcome": "oom", "cost_s": cost}
    if verdict["outcome"] == "timeout":
        rep = {"outcome": "timeout", "cost_s": cost}
        if timed:
            rep["step_time_s"] = round(statistics.median(timed), 5)  # a lower bound: the slow steps were cut
        return rep
    return {"outcome": "failed", "cost_s": cost, "state": info.get("JobState", "UNKNOWN"),
            "classified": verdict["outcome"], "detail": verdict.get("detail", "")}

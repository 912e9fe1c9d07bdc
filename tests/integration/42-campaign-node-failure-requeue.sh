#!/usr/bin/env bash
# A node fails under a running search trial of a contract that asks for Slurm's requeue (sbatch_args =
# ["--requeue"]): Slurm re-runs the task, the campaign records its last run with the requeue noted, and ends
# with the full trial count. Phase B of 42-campaign-node-failure.sh (see there). Needs SLURM_CONF.
exec bash "$(dirname "$0")/42-campaign-node-failure.sh" requeue

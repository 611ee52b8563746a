#!/usr/bin/env bash
# Runs one shard of a satstp sweep inside a cluster task, taking the shard from the scheduler:
#   Slurm array job:        SLURM_ARRAY_TASK_ID (array 0..N-1) and SLURM_ARRAY_TASK_COUNT
#   Kubernetes Indexed Job: JOB_COMPLETION_INDEX and SATSTP_SHARDS (= the Job's completions)
#   anything else:          SATSTP_SHARD_INDEX and SATSTP_SHARDS
# Usage: satstp-shard.sh OUT_DIR sim SCENARIO.toml [satstp sim options]
#        satstp-shard.sh OUT_DIR reproduce NAME... [--quick]
# Writes the shard's partial result into OUT_DIR (shared by all tasks); `satstp merge OUT_DIR`
# then writes what one unsharded run writes. See docs/cluster.md.
set -euo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 OUT_DIR sim|reproduce ARGS..." >&2
    exit 2
fi
out=$1
kind=$2
shift 2
satstp=${SATSTP:-satstp}

if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
    if [ "${SLURM_ARRAY_TASK_MIN:-0}" != 0 ]; then
        echo "$0: submit the array as --array=0-(N-1) (it starts at ${SLURM_ARRAY_TASK_MIN})" >&2
        exit 2
    fi
    index=$SLURM_ARRAY_TASK_ID
    count=${SLURM_ARRAY_TASK_COUNT:?SLURM_ARRAY_TASK_COUNT not set (Slurm 17.11 or later)}
elif [ -n "${JOB_COMPLETION_INDEX:-}" ]; then
    index=$JOB_COMPLETION_INDEX
    count=${SATSTP_SHARDS:?set SATSTP_SHARDS to the Job completions}
else
    index=${SATSTP_SHARD_INDEX:?no shard index: not a Slurm array task or an Indexed Job}
    count=${SATSTP_SHARDS:?set SATSTP_SHARDS}
fi

mkdir -p "$out"
echo "satstp shard $index/$count on $(hostname): $kind $*" >&2
case $kind in
    sim) exec "$satstp" sim "$@" --shard "$index/$count" --shard-out "$out" ;;
    reproduce) exec "$satstp" reproduce "$@" --shard "$index/$count" --out "$out" ;;
    *)
        echo "$0: unknown kind '$kind' (sim or reproduce)" >&2
        exit 2
        ;;
esac

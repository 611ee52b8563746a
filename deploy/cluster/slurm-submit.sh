#!/usr/bin/env bash
# Submits a sharded satstp sweep to Slurm: an array job of N shards, then a merge job that runs
# once every shard succeeded. Run from a directory on the shared filesystem.
# Usage: deploy/cluster/slurm-submit.sh N OUT_DIR sim SCENARIO.toml [options]
#        deploy/cluster/slurm-submit.sh N OUT_DIR reproduce NAME... [--quick]
# Results: OUT_DIR/parts (partials) and OUT_DIR/merged (JSON, CSV, plots, report). docs/cluster.md
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 N OUT_DIR sim|reproduce ARGS..." >&2
    exit 2
fi
n=$1
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/logs"
array=$(sbatch --parsable --array="0-$((n - 1))" --output="$out/logs/shard-%A_%a.out" \
    "$here/slurm-shard.sbatch" "$here/satstp-shard.sh" "$out/parts" "$@")
merge=$(sbatch --parsable --dependency="afterok:${array%%;*}" --output="$out/logs/merge-%j.out" \
    "$here/slurm-merge.sbatch" "$out/parts" "$out/merged")
echo "submitted shards as job $array, merge as job $merge"

#!/usr/bin/env bash
# Run one zoo command on every worker of a Cloud TPU VM slice (multi-host included).
#
#   launch/tpu_vm.sh TPU_NAME ZONE [PROJECT] -- --config=configs/NAME.py --workdir=gs://B/run
#
# Each worker runs `python -m zoo.launch ARGS` from ZOO_DIR (default ~/zoo, a checkout with
# `pip install -e '.[tpu]'` done on every worker, e.g. by this script with SETUP=1).
# jax.distributed finds the other workers by itself on TPU VMs. The workdir must be shared
# by all workers (a gs:// bucket): orbax writes checkpoints from every host, metrics come
# from process 0. gcloud returns non-zero if any worker fails.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 TPU_NAME ZONE [PROJECT] -- zoo.launch flags" >&2
  exit 2
fi
name=$1 zone=$2; shift 2
project=()
if [ "$1" != "--" ]; then project=(--project="$1"); shift; fi
[ "${1:-}" = "--" ] && shift
zoo_dir=${ZOO_DIR:-'~/zoo'}
args=$(printf ' %q' "$@")
setup=''
if [ "${SETUP:-0}" = 1 ]; then
  setup="pip install -e '.[tpu]' && "
fi
exec gcloud compute tpus tpu-vm ssh "$name" --zone="$zone" "${project[@]}" --worker=all \
  --command="cd $zoo_dir && ${setup}python -m zoo.launch$args"

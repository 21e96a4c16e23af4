#!/usr/bin/env bash
# A simulated pod on this machine: N processes on 127.0.0.1, each with DEVICES_PER_PROCESS
# CPU devices (default 4), joined by jax.distributed with gloo CPU collectives.
#
#   launch/local_pod.sh N -- --config=configs/NAME.py --workdir=DIR [more zoo.launch flags]
#
# Output lines are prefixed with [process]: the run's own lines (header, steps, evals) come
# from process 0 alone, the others print what happens to them (a signal, their local
# checkpoint tier, warnings, errors); gloo's connection lines are left out (also where two of
# its threads' writes interleave on one line). If any process
# fails, the others are killed at once (a pod missing a process cannot go on) and the script
# exits with that process's status, naming it; it never hangs. SIGTERM/SIGINT are passed to every process (each saves
# its part of a checkpoint and exits 130 / 143). POD_TIMEOUT (seconds, default 86400) sends
# SIGTERM.
set -u
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N -- --config=configs/NAME.py --workdir=DIR [zoo.launch flags]" >&2
  exit 2
fi
n=$1; shift
[ "${1:-}" = "--" ] && shift
devices=${DEVICES_PER_PROCESS:-4}
timeout_s=${POD_TIMEOUT:-86400}
python=${PYTHON:-python}
# the caller's XLA flags travel to every process, their device count replaced by ours
xla_flags=$(sed -E 's/--xla_force_host_platform_device_count=[0-9]+//g' <<< "${XLA_FLAGS:-}")
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

declare -A process_of
pids=()
for ((i = 0; i < n; i++)); do
  JAX_PLATFORMS=cpu XLA_FLAGS="$xla_flags --xla_force_host_platform_device_count=$devices" \
    "$python" -m zoo.launch "$@" --coordinator_address="127.0.0.1:$port" \
    --num_processes="$n" --process_id="$i" \
    > >(grep --line-buffered -v 'is connected to [0-9]* peer ranks' | sed -u "s/^/[$i] /") 2>&1 &
  pids+=($!)
  process_of[$!]=$i
done

trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait "${pids[@]}"; exit 143' TERM INT
(sleep "$timeout_s" && echo "local_pod: POD_TIMEOUT=$timeout_s s reached" >&2 &&
  kill -TERM $$) 2>/dev/null &
watchdog=$!

status=0
for ((left = n; left > 0; left--)); do
  wait -n -p done_pid "${!process_of[@]}"
  rc=$?
  failed=${process_of[$done_pid]}
  unset "process_of[$done_pid]"
  if [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; then
    status=$rc  # stopped by a signal after the pod's save: the others are stopping too
  elif [ "$rc" -ne 0 ]; then
    status=$rc
    echo "local_pod: process $failed exited with status $rc; stopping the" \
         "other processes" >&2
    kill -KILL "${pids[@]}" 2>/dev/null
    break
  fi
done
pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null
wait 2>/dev/null  # the killed processes and the output filters
exit "$status"

"""Entry point: python -m zoo.launch --config=configs/NAME.py[:arg] [--workdir=DIR] [--mode=...]

Overrides follow the config: --config.train.steps=100 --config.model.dropout_rate=0.1.
Exit codes (docs/reliability.md): 0 done, 1 training failed (e.g. NaN streak), 2 bad input
(one line naming the field and the fix, before anything is written or compiled), 75 a hung
step (the watchdog, zoo/train/watchdog.py), 130 / 143 stopped by SIGINT / SIGTERM after
saving the step it was on.
"""

import os
import sys

from absl import flags

from zoo.cli import start

FLAGS = flags.FLAGS
flags.DEFINE_string('config', None, "configs/NAME.py[:arg]; --mode=eval and generate on a "
                    "trained --workdir read the run's own config.json without it")
flags.DEFINE_string('workdir', None, 'metrics.jsonl, TensorBoard events, checkpoints/, '
                    'tokenizer/; default runs/NAME (runs/NAME_ARG for configs/NAME.py:ARG)')
flags.DEFINE_enum('mode', 'train', ['train', 'eval', 'generate', 'plan'], 'what to run')
flags.DEFINE_multi_string('prompt', [], '--mode=generate: a prompt to continue (repeatable; '
                          'settings in config.generate)')
flags.DEFINE_string('plan_json', None, '--mode=plan: also write the plan as JSON here')
flags.DEFINE_bool('plan_compile', False, '--mode=plan: compile the train step for the mesh on '
                  "this machine's devices and report the compiler's memory use")
flags.DEFINE_string('plan_topology', None, '--mode=plan: compile for this TPU slice (e.g. '
                    'v5p-128, v5e-256, v6e-64, v4-512) with libtpu, no TPU needed')
flags.DEFINE_bool('plan_sweep', False, '--mode=plan with --plan_topology: rank every '
                  'data x fsdp x tensor (x expert) mesh by estimated step time and memory')
flags.DEFINE_integer('plan_sweep_compile', 0, '--plan_sweep: compile down the ranking until '
                     'this many meshes fit the compiler, showing its bytes beside each')
flags.DEFINE_integer('plan_sweep_top', 20, '--plan_sweep: show this many of the fastest '
                     'meshes that fit (the rest are counted; --plan_json holds every mesh)')
flags.DEFINE_bool('plan_sweep_all', False, '--plan_sweep: show every mesh, those that do not '
                  'fit and those that cannot shard the shape (with the reason) too')
flags.DEFINE_string('coordinator_address', None,
                    'host:port of process 0, for multi-process runs off TPU VMs / SLURM')
flags.DEFINE_integer('num_processes', None, 'processes in a multi-process run')
flags.DEFINE_integer('process_id', None, 'this process, in a multi-process run')
flags.DEFINE_integer('distributed_timeout', 300,
                     'seconds to wait for all processes to join (and at most 60 for a '
                     'heartbeat) before giving up with an error')

def default_workdir(config_spec):
  """runs/NAME for configs/NAME.py, runs/NAME_ARG for a variant (its shapes differ)."""
  path, _, arg = config_spec.partition(':')
  name = os.path.splitext(os.path.basename(path))[0]
  return os.path.join('runs', f'{name}_{arg}' if arg else name)


def _initialize_distributed():
  """Joins the other processes; a missing or dead one ends this one in bounded time."""
  import jax  # pylint: disable=g-import-not-at-top
  from zoo.errors import ConfigError  # pylint: disable=g-import-not-at-top
  timeouts = {'initialization_timeout': FLAGS.distributed_timeout,
              'heartbeat_timeout_seconds': min(FLAGS.distributed_timeout, 60)}
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')  # CPU pods; else unused
  if FLAGS.num_processes and FLAGS.num_processes > 1:
    if not (FLAGS.coordinator_address and FLAGS.process_id is not None):
      raise ConfigError('--num_processes>1 needs --coordinator_address=HOST:PORT and '
                       '--process_id')
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes,
                               FLAGS.process_id, **timeouts)
  elif any(v in os.environ for v in ('TPU_WORKER_HOSTNAMES', 'SLURM_JOB_ID')):
    jax.distributed.initialize(**timeouts)


def run(overrides):
  """Loads the config, runs the mode; bad input -> one line on stderr and exit 2."""
  from zoo import run as run_lib  # pylint: disable=g-import-not-at-top
  from zoo.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from zoo import plan  # pylint: disable=g-import-not-at-top
  from zoo.plan import preflight  # pylint: disable=g-import-not-at-top
  from zoo import storage  # pylint: disable=g-import-not-at-top
  from zoo.infer import run as infer_run  # pylint: disable=g-import-not-at-top
  from zoo.infer import task_eval  # pylint: disable=g-import-not-at-top
  from zoo.post import grpo  # pylint: disable=g-import-not-at-top
  from zoo.post import rewards  # pylint: disable=g-import-not-at-top
  from zoo.train import evaluate  # pylint: disable=g-import-not-at-top
  from zoo.train import checkpoint  # pylint: disable=g-import-not-at-top
  from zoo.train import loop  # pylint: disable=g-import-not-at-top
  from zoo.train import runtime  # pylint: disable=g-import-not-at-top
  from zoo.train import stop  # pylint: disable=g-import-not-at-top
  from zoo.train import run_config  # pylint: disable=g-import-not-at-top
  try:
    if FLAGS.config:
      resolved = run_lib.load(FLAGS.config, overrides)  # the config, read once
    elif FLAGS.mode in ('eval', 'generate') and FLAGS.workdir:
      resolved = run_config.resolve(FLAGS.workdir, None, overrides)  # the run's own
    else:
      raise ConfigError('--config=configs/NAME.py[:arg] is needed (only --mode=eval and '
                        "--mode=generate read a trained --workdir's own config.json without "
                        'it)')
    if FLAGS.mode == 'plan':
      storage.check(FLAGS.plan_json or '', '--plan_json')
      plan.run(resolved, FLAGS.plan_json, FLAGS.plan_compile, FLAGS.plan_topology,
               FLAGS.plan_sweep, FLAGS.plan_sweep_compile, FLAGS.plan_sweep_top,
               FLAGS.plan_sweep_all)
      return
    workdir = FLAGS.workdir or default_workdir(FLAGS.config)
    storage.check(workdir, '--workdir')
    storage.check_writable(workdir, '--workdir')
    if FLAGS.mode == 'generate':
      infer_run.check(resolved.config, FLAGS.prompt)
    _initialize_distributed()
    if FLAGS.mode == 'train':
      place = runtime.placement(resolved)  # a mesh that cannot be built says so first
      preflight.check(resolved)  # before anything is written or compiled
      if resolved.config.train.objective == 'grpo':
        grpo.train(resolved, workdir, place)
      else:
        loop.train(resolved, workdir, task_eval.make, place)
    elif FLAGS.mode == 'eval' and resolved.config.train.objective == 'grpo':
      grpo.run_eval(resolved, workdir)
    elif FLAGS.mode == 'eval':
      evaluate.run(resolved, workdir, task_eval.make)
    else:
      infer_run.run(resolved, workdir, FLAGS.prompt)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)
  except (loop.TrainingError, checkpoint.WriteError, rewards.RewardError) as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(1)
  except stop.Interrupted as e:
    print(e.message, flush=True)
    sys.exit(e.exit_code)


def main():
  start(run)


if __name__ == '__main__':
  main()

"""python -m zoo.bench [--config=configs/NAME.py[:arg]] [--config.FIELD=VALUE ...]
    [--runs=3] [--steps=20] [--decode_batches=1,8] [--prompt_len=32] [--new_tokens=128]
    [--torch=auto|on|off]

Without --config: a GPT-2-shaped decoder (configs/gpt2_small.py at d_model 256, 4 layers,
4 heads, mlp 1024, vocab 4096, float32, the layer scan unrolled as on CPUs), batch 16 x 128.

Each of --runs rounds times --steps train steps of the zoo, then as many of PyTorch, then
decoding at each batch size on both sides (alternating, so a noisy machine slows both
alike); the table gives the median over rounds of each side's median step, the spread of
the zoo's steps (10th-90th percentile), the ratio zoo / PyTorch of each round's tokens/s
(median over rounds), compile seconds and MFU where the device's peak is known.

Each round also times the model's MLP input projection ([B L, D] x [D, F]) alone on each
side, 5 times per train step timed, and the table sets the step's model FLOP/s beside it.
Where a device has no known peak (CPUs), that product's speed is the measured ceiling; and
how the two sides' matmul libraries compare changes from CPU to CPU (docs/performance.md).
"""

import os
import statistics
import sys
import time

from absl import flags

from zoo.cli import start

DEFAULT_CONFIG = 'configs/gpt2_small.py'
DEFAULT_OVERRIDES = ('model.num_layers=4', 'model.d_model=256', 'model.num_heads=4',
                     'model.mlp_dim=1024', 'model.vocab_size=4096', 'model.max_length=128',
                     'model.dtype=float32', 'data.seq_len=128', 'train.batch_size=16',
                     'model.scan_unroll=4')  # the CPU setting (zoo/config/schema.py)

MATMUL_CALLS = 5  # products timed alone per train step timed (the default shape's step is ~50)

FLAGS = flags.FLAGS
flags.DEFINE_string('config', None, f'configs/NAME.py[:arg]; default {DEFAULT_CONFIG} at the '
                    'GPT-2 CPU shape above')
flags.DEFINE_integer('runs', 3, 'alternating rounds of zoo and PyTorch')
flags.DEFINE_integer('steps', 20, 'timed train steps per side and round')
flags.DEFINE_string('decode_batches', '1,8', 'decode batch sizes ("" = no decoding)')
flags.DEFINE_integer('prompt_len', 32, 'decode prompt tokens')
flags.DEFINE_integer('new_tokens', None, 'decode new tokens (greedy, no EOS); default 128, '
                     'or what a learned position table leaves after the prompt')
flags.DEFINE_enum('torch', 'auto', ['auto', 'on', 'off'],
                  'compare with Hugging Face PyTorch: auto = when torch is installed')


def _timed(fn, count):
  times = []
  for _ in range(count):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def _percentile(values, q):
  values = sorted(values)
  return values[min(int(q * len(values)), len(values) - 1)]


def matmul_shape(config):
  """-> (M, K, N) of the MLP's input projection over a batch: [B L, D] x [D, F]."""
  return (config.train.batch_size * config.data.seq_len, config.model.d_model,
          config.model.mlp_dim)


def _summary(times, tokens, new_tokens, decode_batches, first_loss, matmul_flops):
  """One side's timings -> its numbers: medians over rounds, spread over all steps."""
  medians = [statistics.median(r) for r in times['train']]
  everything = [x for r in times['train'] for x in r]
  matmuls = [matmul_flops / statistics.median(r) / 1e9 for r in times['matmul']]
  return {
      'train_tokens_per_sec': tokens / statistics.median(medians),
      'matmul_gflops': statistics.median(matmuls),
      'round_matmul_gflops': matmuls,
      'step_ms': 1e3 * statistics.median(medians),
      'step_ms_p10': 1e3 * _percentile(everything, 0.1),
      'step_ms_p90': 1e3 * _percentile(everything, 0.9),
      'first_loss': first_loss,
      'round_tokens_per_sec': [tokens / m for m in medians],
      **{f'decode_tokens_per_sec_b{b}': b * new_tokens / statistics.median(
          [x for r in times[b] for x in r]) for b in decode_batches},
      **{f'decode_round_b{b}': [b * new_tokens / r[0] for r in times[b]]
         for b in decode_batches}}


def measure(resolved, runs, steps, decode_batches, prompt_len, new_tokens, use_torch):
  """The resolved run's (zoo/run) numbers of the table -> {'zoo': {...}, 'torch': {...} or
  None, 'ratios': {...}}."""
  config = resolved.config
  import jax  # pylint: disable=g-import-not-at-top
  from zoo.bench import jax_side  # pylint: disable=g-import-not-at-top
  from zoo.train import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from zoo import counting  # pylint: disable=g-import-not-at-top
  from zoo.bench import machine  # pylint: disable=g-import-not-at-top
  batch = jax_side.random_batch(config)
  zoo = jax_side.Trainer(resolved, batch)
  shape = matmul_shape(config)
  sides = {'zoo': {'train': zoo, 'matmul': jax_side.Matmul(shape, config.model.dtype)}}
  if use_torch:
    from zoo.bench import torch_side  # pylint: disable=g-import-not-at-top
    sides['torch'] = {'train': torch_side.Trainer(config, zoo.params, batch),
                      'matmul': torch_side.Matmul(shape)}
  for b in decode_batches:
    decoder = jax_side.Decoder(zoo.model, zoo.variables(), b, prompt_len, new_tokens)
    sides['zoo'][b] = decoder
    if use_torch:
      sides['torch'][b] = torch_side.Decoder(sides['torch']['train'], decoder.ids, new_tokens)
  for side in sides.values():  # warm up: decoding compiles or fills caches on first use
    for b in decode_batches:
      side[b].run()
    side['train'].step()
    side['matmul'].run()

  times = {name: {key: [] for key in side} for name, side in sides.items()}
  for _ in range(runs):
    for name, side in sides.items():
      times[name]['train'].append(_timed(side['train'].step, steps))
      times[name]['matmul'].append(_timed(side['matmul'].run, MATMUL_CALLS * steps))
    for b in decode_batches:
      for name, side in sides.items():
        times[name][b].append(_timed(side[b].run, 1))

  results = {name: _summary(t, config.train.batch_size * config.data.seq_len, new_tokens,
                            decode_batches, sides[name]['train'].first_loss,
                            sides[name]['matmul'].flops)
             for name, t in times.items()}
  flops_per_token = counting.flops_per_token(config)
  for side in results.values():
    side['model_gflops'] = side['train_tokens_per_sec'] * flops_per_token / 1e9
  z = results['zoo']
  z['compile_seconds'] = zoo.compile_seconds
  z['memory'] = zoo.memory
  z['mfu'] = metrics_lib.mfu(z['model_gflops'] * 1e9, jax.devices())
  z['device'] = machine.describe(jax.devices()[0])
  ratios = {}
  if use_torch:
    p = results['torch']
    ratios['train'] = statistics.median(
        a / b for a, b in zip(z['round_tokens_per_sec'], p['round_tokens_per_sec']))
    ratios['matmul'] = statistics.median(
        a / b for a, b in zip(z['round_matmul_gflops'], p['round_matmul_gflops']))
    for b in decode_batches:
      ratios[f'decode_b{b}'] = statistics.median(
          a / c for a, c in zip(z[f'decode_round_b{b}'], p[f'decode_round_b{b}']))
  return {'zoo': z, 'torch': results.get('torch'), 'ratios': ratios}


def table(results, decode_batches):
  """The printed table: one row per measure, zoo | PyTorch | zoo / PyTorch."""
  z, p, r = results['zoo'], results['torch'], results['ratios']
  rows = [('train tokens/s', f'{z["train_tokens_per_sec"]:,.0f}',
           p and f'{p["train_tokens_per_sec"]:,.0f}', r.get('train')),
          ('step ms, median', f'{z["step_ms"]:.1f}', p and f'{p["step_ms"]:.1f}', None),
          ('step ms, p10-p90', f'{z["step_ms_p10"]:.1f}-{z["step_ms_p90"]:.1f}',
           p and f'{p["step_ms_p10"]:.1f}-{p["step_ms_p90"]:.1f}', None),
          ('first loss', f'{z["first_loss"]:.4f}', p and f'{p["first_loss"]:.4f}', None),
          ('compile s (train step)', f'{z["compile_seconds"]:.1f}', p and '-', None),
          ('MFU', 'n/a (no known peak for this device)' if z['mfu'] is None
           else f'{z["mfu"]:.1%}', p and '-', None),
          ('model GFLOP/s in the step', f'{z["model_gflops"]:.1f}',
           p and f'{p["model_gflops"]:.1f}', None),
          ('matmul GFLOP/s alone, [B L, D] x [D, F]', f'{z["matmul_gflops"]:.1f}',
           p and f'{p["matmul_gflops"]:.1f}', r.get('matmul')),
          ('step / matmul GFLOP/s', f'{z["model_gflops"] / z["matmul_gflops"]:.0%}',
           p and f'{p["model_gflops"] / p["matmul_gflops"]:.0%}', None)]
  for b in decode_batches:
    rows.append((f'decode tokens/s, batch {b}', f'{z[f"decode_tokens_per_sec_b{b}"]:,.0f}',
                 p and f'{p[f"decode_tokens_per_sec_b{b}"]:,.0f}', r.get(f'decode_b{b}')))
  head = ('', 'zoo (JAX)', 'PyTorch (HF)', 'zoo / PyTorch')
  body = [(a, b, c or '-', '-' if d is None else f'{d:.2f}x') for a, b, c, d in rows]
  widths = [max(len(row[i]) for row in [head, *body]) for i in range(4)]
  line = lambda row: '| ' + ' | '.join(v.ljust(w) for v, w in zip(row, widths)) + ' |'
  return '\n'.join([line(head), '|' + '|'.join('-' * (w + 2) for w in widths) + '|',
                    *map(line, body)])


def _new_tokens(config, prompt_len, new_tokens):
  """--new_tokens, defaulted and checked against a learned position table."""
  from zoo import config as config_lib  # pylint: disable=g-import-not-at-top
  m = config.model
  room = m.max_length - prompt_len if m.position == 'learned' else None
  if new_tokens is None:
    new_tokens = 128 if room is None else min(128, room)
  if new_tokens < 1 or (room is not None and new_tokens > room):
    raise config_lib.ConfigError(
        f'--new_tokens={new_tokens} after --prompt_len={prompt_len} must be >= 1 and fit '
        f'model.max_length={m.max_length} (learned positions); lower one of them')
  return new_tokens


def run(overrides):
  """Loads the config and the sides, measures, prints; bad input -> one line, exit 2."""
  from zoo import config as config_lib  # pylint: disable=g-import-not-at-top
  from zoo import run as run_lib  # pylint: disable=g-import-not-at-top
  from zoo.bench import torch_side  # pylint: disable=g-import-not-at-top
  spec = FLAGS.config or DEFAULT_CONFIG
  if not FLAGS.config:
    overrides = [*DEFAULT_OVERRIDES, *overrides]
  try:
    resolved = run_lib.load(spec, overrides)
    config = resolved.config
    batches = [int(b) for b in FLAGS.decode_batches.split(',') if b.strip()]
    new_tokens = _new_tokens(config, FLAGS.prompt_len, FLAGS.new_tokens)
    for name in ('runs', 'steps', 'prompt_len'):
      if FLAGS[name].value < 1:
        raise config_lib.ConfigError(f'--{name}={FLAGS[name].value} must be >= 1')
    missing = torch_side.available()
    if FLAGS.torch == 'on' and missing:
      raise config_lib.ConfigError(f'--torch=on: {missing}; or use --torch=off')
    use_torch = FLAGS.torch == 'on' or (FLAGS.torch == 'auto' and not missing)
    if use_torch:
      torch_side.check(config)
  except ValueError as e:  # ConfigError included; a bad --decode_batches too
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)
  command = ' '.join(['python -m zoo.bench', f'--config={spec}',
                      *(f'--config.{o}' for o in overrides),
                      *(a for a in sys.argv[1:] if not a.startswith('--config'))])
  results = measure(resolved, FLAGS.runs, FLAGS.steps, batches, FLAGS.prompt_len, new_tokens,
                    use_torch)
  m, t = config.model, config.train
  print(f'{command}\none device, {results["zoo"]["device"]}; {m.family} d_model {m.d_model}, '
        f'{m.num_layers} layers, vocab {m.vocab_size}, {m.dtype}, batch {t.batch_size} x '
        f'{config.data.seq_len}; {FLAGS.runs} rounds of {FLAGS.steps} steps; decode '
        f'{FLAGS.prompt_len} + {new_tokens} tokens, greedy; GLIBC_TUNABLES='
        f'{os.environ.get("GLIBC_TUNABLES", "(unset)")} (zoo/platform.py)'
        + ('' if use_torch else f'; PyTorch: {torch_side.available() or "--torch=off"}'))
  print(table(results, batches), flush=True)
  return results


def main():
  start(run)


if __name__ == '__main__':
  main()

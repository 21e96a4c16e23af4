"""MFU (FLOPs by the convention in zoo/counting.py), the metrics writers (JSONL +
TensorBoard), and the alarms read off each logged row."""

import json
import os
import sys

import numpy as np

from zoo import storage

METRICS = 'metrics.jsonl'

# Dense bf16 peak FLOP/s per device, by jax device_kind prefix (vendor data sheets).
PEAK_FLOPS = (
    ('TPU v4', 275e12),
    ('TPU v5 lite', 197e12), ('TPU v5e', 197e12),
    ('TPU v5p', 459e12), ('TPU v5', 459e12),
    ('TPU v6 lite', 918e12), ('TPU v6e', 918e12), ('TPU7x', 2307e12),
    ('NVIDIA A100', 312e12),
    ('NVIDIA H100', 989e12), ('NVIDIA H200', 989e12), ('NVIDIA GH200', 989e12),
    ('NVIDIA B200', 2250e12),
)


def peak_flops(device):
  """Peak FLOP/s of one device, or None where unknown (CPUs)."""
  for prefix, flops in PEAK_FLOPS:
    if device.device_kind.startswith(prefix):
      return flops
  return None


def mfu(flops_per_sec, devices):
  peaks = [peak_flops(d) for d in devices]
  if any(p is None for p in peaks):
    return None
  return flops_per_sec / sum(peaks)


class Writer:
  """Appends rows to WORKDIR/metrics.jsonl and scalars to TensorBoard; process 0 only.
  In a bucket the files are written locally and copied there after every row (objects
  cannot be appended to), the rows of an earlier run first fetched so they are kept."""

  def __init__(self, workdir, enabled=True):
    self.enabled = enabled
    if not enabled:
      return
    self.mirror = storage.Mirror(workdir)
    self.mirror.pull(METRICS)
    self.jsonl = open(os.path.join(self.mirror.local, METRICS), 'a', encoding='utf-8')
    self.tensorboard = _summary_writer()(self.mirror.local)

  def write(self, row):
    if not self.enabled:
      return
    row = {k: _plain(v) for k, v in row.items()}
    self.jsonl.write(json.dumps(row) + '\n')
    self.jsonl.flush()
    for key, value in row.items():
      if key != 'step' and isinstance(value, (int, float)) and not isinstance(value, bool):
        self.tensorboard.add_scalar(key, value, row['step'])
    self.tensorboard.flush()
    self.mirror.push()

  def close(self):
    if self.enabled:
      self.jsonl.close()
      self.tensorboard.close()
      self.mirror.close()


def _summary_writer():
  """tensorboardX's SummaryWriter, imported without torch: tensorboardX imports torch
  wherever it is installed (1.4 s of every start here) to accept its tensors; the zoo
  writes floats. A torch already imported is left as it is."""
  blocked = 'torch' not in sys.modules
  if blocked:
    sys.modules['torch'] = None  # `import torch` raises ImportError: tensorboardX goes on
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  finally:
    if blocked:
      del sys.modules['torch']
  return SummaryWriter


def _plain(value):
  """numpy scalars -> Python numbers; NaN/Inf -> None so every row stays valid JSON."""
  if isinstance(value, (np.generic, np.ndarray)):
    value = value.item()
  if isinstance(value, float) and not np.isfinite(value):
    return None
  return value


def read(workdir):
  """All rows of WORKDIR/metrics.jsonl."""
  text = storage.read_text(storage.join(workdir, METRICS))
  return [json.loads(line) for line in text.splitlines() if line.strip()]


def finished_eval_loss(workdir):
  """The last eval loss of a run that ended (benchmarks read finished runs), else None."""
  if not storage.exists(storage.join(workdir, METRICS)):
    return None
  rows = read(workdir)
  if not any(r.get('event') == 'end' for r in rows):
    return None
  return [r['eval_loss'] for r in rows if 'eval_loss' in r][-1]


class CollapseWatch:
  """Warns when one expert of a MoE layer is chosen by more than moe.collapse_ratio times
  the balanced share (top_k / num_experts: each token picks top_k experts, so the shares
  sum to top_k) for moe.collapse_rows logged rows in a row (routing collapse)."""

  def __init__(self, moe_config):
    self.moe, self.streak = moe_config, 0
    self.balanced = moe_config.top_k / moe_config.num_experts
    self.share = moe_config.collapse_ratio * self.balanced  # > 1: a share it cannot reach

  def check(self, step, load):
    """load: [MoE layer, expert] shares; -> True when it warned."""
    worst = float(np.max(load))
    self.streak = self.streak + 1 if worst > self.share else 0
    if self.streak == self.moe.collapse_rows:
      layer, expert = np.unravel_index(int(np.argmax(load)), np.shape(load))
      print(f'warning: routing collapse at step {step}: expert {expert} of MoE layer {layer} '
            f'takes {worst:.0%} of its tokens, {worst / self.balanced:.1f}x the balanced '
            f'{self.balanced:.0%} (top_k {self.moe.top_k} of {self.moe.num_experts}), for '
            f'{self.moe.collapse_rows} logged rows (moe.collapse_ratio='
            f'{self.moe.collapse_ratio}); {self._advice()}', flush=True)
      return True
    return False

  def _advice(self):
    """What to raise: the balancing this model already has, else the Switch loss."""
    moe = self.moe
    knobs = [f'model.moe.{name}={moe[name]}' for name in ('balance_loss', 'bias_update_rate')
             if moe[name] > 0]
    if knobs:
      return 'raise ' + ' or '.join(knobs)
    return 'this model has no balancing: set model.moe.balance_loss (Switch: 0.01)'


class Alarms:
  """Warnings read off each logged step's metrics: routing collapse where the model has
  experts (its rows carry moe_load)."""

  def __init__(self, config):
    moe = config.model.moe
    self.collapse = CollapseWatch(moe) if moe.num_experts else None

  def check(self, step, metrics):
    if self.collapse and 'moe_load' in metrics:
      self.collapse.check(step, metrics['moe_load'])

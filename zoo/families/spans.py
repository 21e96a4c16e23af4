"""T5's span-corruption arithmetic (Raffel et al. 2020, sec. 3.1.4; T5's
random_spans_helper and random_spans_noise_mask): how many tokens a text of n tokens loses to
noise spans, in how many spans, and the raw piece length whose corrupted inputs just fill
data.seq_len. The pipeline (zoo/data/pipeline.py) cuts and corrupts by it; a training
phase of another length (zoo/phases.py) and plan mode size their targets by it.
"""

from zoo.errors import ConfigError


def noise_and_spans(n, data_config):
  """(noise tokens, spans) for an n-token text, as in T5's random_spans_noise_mask."""
  noise = min(max(1, round(n * data_config.noise_density)), n)
  spans = max(1, min(round(noise / data_config.mean_noise_span_length), noise,
                     max(n - noise, 1), data_config.num_sentinels))
  return noise, spans


def lengths(data_config):
  """T5's rule (random_spans_helper): the raw piece length whose inputs (its kept tokens, a
  sentinel per noise span, EOS) just fill data.seq_len -> (raw, inputs, targets) lengths;
  512 inputs at noise 0.15 and mean span 3: 568 raw tokens, 114 targets."""
  def sizes(n):
    noise, spans = noise_and_spans(n, data_config)
    return n - noise + spans + 1, noise + spans + 1
  n = 1
  while sizes(n + 1)[0] <= data_config.seq_len:
    n += 1
  return (n, *sizes(n))


def check(data_config):
  """A ConfigError when span corruption's pieces cannot fit the configured lengths."""
  raw, inputs, targets = lengths(data_config)
  if inputs > data_config.seq_len or raw < 2:
    raise ConfigError(f'data.seq_len={data_config.seq_len} holds no span-corruption example '
                      '(a kept token, a sentinel and EOS); raise it')
  if targets > data_config.target_seq_len:
    raise ConfigError(f'span corruption of {raw}-token pieces (data.seq_len='
                      f'{data_config.seq_len}, data.noise_density={data_config.noise_density}, '
                      f'data.mean_noise_span_length={data_config.mean_noise_span_length}) '
                      f'makes {targets}-token targets, past data.target_seq_len='
                      f'{data_config.target_seq_len}; raise it to {targets}')

"""python -m zoo.serve --workdir=W [--host=127.0.0.1] [--port=8000] [--config=...]
[--config.serve.FIELD=VALUE ...]: the run in W (a zoo run, a LoRA run, a Hugging Face
import) behind the OpenAI-compatible API (docs/serving.md). Bad input: one line, exit 2."""

import sys

from absl import flags

from zoo.cli import start

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'the run: its checkpoints, tokenizer and config.json',
                    required=True)
flags.DEFINE_string('config', None, "configs/NAME.py[:arg]; default: the run's own "
                    'WORKDIR/config.json')
flags.DEFINE_string('host', '127.0.0.1', 'the address to listen on (0.0.0.0: every interface)')
flags.DEFINE_integer('port', 8000, 'the port to listen on')


def run(overrides):
  from aiohttp import web  # pylint: disable=g-import-not-at-top
  from zoo.errors import ConfigError  # pylint: disable=g-import-not-at-top
  from zoo.serve import load  # pylint: disable=g-import-not-at-top
  from zoo.serve import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from zoo.serve import server  # pylint: disable=g-import-not-at-top
  from zoo.train import run_config  # pylint: disable=g-import-not-at-top
  try:
    served = load.from_workdir(run_config.resolve(FLAGS.workdir, FLAGS.config, overrides),
                               FLAGS.workdir)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    sys.exit(2)
  engine, ctx = served.engine, served.context
  s = engine.settings
  print(f'serving {ctx.model_name!r} on http://{FLAGS.host}:{FLAGS.port} '
        f'({s.num_pages - 1} pages of {s.page_size} tokens, {s.max_seqs} rows, context '
        f'{ctx.max_len})', flush=True)
  engine.start()
  try:
    web.run_app(server.make_app(engine, ctx, metrics_lib.Metrics(engine)), host=FLAGS.host,
                port=FLAGS.port, handler_cancellation=True, access_log=None, print=None)
  finally:
    engine.stop()


def main():
  start(run)


if __name__ == '__main__':
  main()

"""Every path the zoo reads or writes: local files and Google Cloud Storage (gs://) through
one API on etils.epath, so a workdir, a prepared corpus, a tokenizer or an export may live in
a bucket (gs:// needs gcsfs: pip install 'zoo[gcs]'; the tpu extra includes it). Other
object stores are refused with the fix (ArrayRecord reads gs:// itself, not s3:// or az://).

Objects cannot be appended to or renamed atomically, so the two writes that rely on that
work the same way everywhere:
  write_atomic(path, write)  write(a local temporary file), then a rename (local) or one
                             upload (an object is created whole or not at all);
  Mirror(directory)          files written locally and copied to the directory after each
                             change (metrics.jsonl, TensorBoard events): a remote one is
                             staged in a local temporary directory, a local one is the
                             directory itself.
Libraries that open paths themselves (orbax, ArrayRecord) take `native(path)`.
"""

import glob as glob_lib
import os
import shutil
import tempfile

from etils import epath

from zoo.errors import ConfigError

REMOTE = ('gs://',)
_OTHER_STORES = ('s3://', 'az://', 'hf://', 'http://', 'https://')


def is_remote(path):
  return str(path).startswith(REMOTE)


def check(path, field):
  """A ConfigError naming `field` when `path` is in an object store this install cannot
  reach (gcsfs missing) or does not read (not gs://); before anything compiles."""
  if str(path).startswith(_OTHER_STORES):
    raise ConfigError(f'{field}={path!r}: the zoo reads and writes local paths and gs:// '
                      'buckets; copy the data to one of them (or mount the store locally)')
  if not is_remote(path):
    return
  import importlib.util  # pylint: disable=g-import-not-at-top
  if importlib.util.find_spec('gcsfs') is None and importlib.util.find_spec('tensorflow') is None:
    raise ConfigError(f'{field}={path!r} needs gcsfs to reach gs:// paths; '
                      "pip install 'zoo[gcs]' (or use a local path)")


def check_writable(path, field):
  """A ConfigError naming `field` when a local directory `path` cannot be used: it is a
  file, it lies under a file, or it (or its nearest existing parent, where it would be
  created) cannot be written. Creates nothing that stays."""
  if is_remote(path):
    return
  path = os.path.abspath(os.path.expanduser(str(path)))
  existing = path
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    where = 'is a file' if existing == path else f'cannot be created: {existing} is a file'
    raise ConfigError(f'{field}={path} {where}; pass a directory path')
  try:
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as e:
    raise ConfigError(f'{field}={path} cannot be written ({existing}: {e.strerror}); pass a '
                      'directory this user can write') from None


def absolute(path):
  """Absolute when local; a remote path is absolute already."""
  return str(path) if is_remote(path) else os.path.abspath(path)


def native(path):
  """The path string for libraries that open it themselves (orbax, ArrayRecord); the one
  place a test bucket (tests/fake_bucket.py) redirects them."""
  return absolute(path)


def join(*parts):
  return os.path.join(*(str(p) for p in parts))


def exists(path):
  return epath.Path(path).exists()


def isdir(path):
  return epath.Path(path).is_dir()


def isfile(path):
  path = epath.Path(path)
  return path.exists() and not path.is_dir()


def listdir(path):
  """Names in a directory (none when it does not exist)."""
  path = epath.Path(path)
  return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def glob(pattern):
  """Sorted paths matching a pattern (in a bucket: wildcards in its last parts, no '**')."""
  pattern = str(pattern)
  if not is_remote(pattern):
    return sorted(glob_lib.glob(pattern))
  fixed = []
  for part in pattern.split('/'):
    if any(c in part for c in '*?['):
      break
    fixed.append(part)
  root = '/'.join(fixed) or '.'
  rest = pattern[len(root):].lstrip('/')
  return sorted(str(p) for p in epath.Path(root).glob(rest))


def walk_files(directory):
  """Every file under a directory, sorted, hidden names left out."""
  found = []
  for root, _, names in epath.Path(directory).walk():
    found += [join(root, n) for n in names if not n.startswith('.')]
  return sorted(found)


def size(path):
  return epath.Path(path).stat().length


def mtime_ns(path):
  if is_remote(path):
    return epath.Path(path).stat().mtime * 10**9
  return os.stat(path).st_mtime_ns


def makedirs(path):
  epath.Path(path).mkdir(parents=True, exist_ok=True)


def open_file(path, mode='r'):
  """A file object (text modes read and write UTF-8)."""
  if 'b' in mode:
    return epath.Path(path).open(mode)
  return epath.Path(path).open(mode, encoding='utf-8')


def read_bytes(path):
  with open_file(path, 'rb') as f:
    return f.read()


def read_text(path):
  return read_bytes(path).decode('utf-8')


def local_copy(path):
  """A local file with the contents of `path` (itself when local)."""
  if not is_remote(path):
    return str(path)
  handle, local = tempfile.mkstemp(prefix='zoo-', suffix='-' + os.path.basename(str(path)))
  with os.fdopen(handle, 'wb') as f:
    f.write(read_bytes(path))
  return local


def remove(path):
  epath.Path(path).unlink(missing_ok=True)


def rename(path, target):
  epath.Path(path).rename(target)


def write_atomic(path, write):
  """write(local temporary path), then it becomes `path` whole: `path` is complete or
  absent, whatever happens in between."""
  path = str(path)
  if is_remote(path):
    handle, tmp = tempfile.mkstemp(prefix='zoo-', suffix='.tmp')
    os.close(handle)
    try:
      write(tmp)
      upload(tmp, path)
    finally:
      os.remove(tmp)
    return
  directory, name = os.path.split(path)
  os.makedirs(directory or '.', exist_ok=True)
  tmp = os.path.join(directory, f'.{name}.{os.getpid()}.tmp')
  write(tmp)
  os.replace(tmp, path)


def write_bytes(path, data):
  def write(tmp):
    with open(tmp, 'wb') as f:
      f.write(data)
  write_atomic(path, write)


def upload(local, path):
  """Copies a local file to `path` (one object written whole when remote)."""
  with open(local, 'rb') as src, open_file(path, 'wb') as dst:
    shutil.copyfileobj(src, dst, 8 << 20)


def free_bytes(path):
  """Free bytes on the local filesystem that holds `path`; None for object stores and
  where unknown."""
  if is_remote(path):
    return None
  path = os.path.abspath(path)
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  try:
    return shutil.disk_usage(path).free
  except OSError:
    return None


class Mirror:
  """A directory whose files are written locally with ordinary file APIs (append, flush)
  and then pushed: `local` is where to write, push() copies what changed to `directory`.
  Remote: `local` is a temporary directory and pull(name) first fetches a file already
  there, so appends continue it; local: `local` is the directory and both are no-ops."""

  def __init__(self, directory):
    self.directory = str(directory)
    self.remote = is_remote(directory)
    makedirs(directory)
    self.local = tempfile.mkdtemp(prefix='zoo-mirror-') if self.remote else self.directory
    self.pushed = {}

  def pull(self, name):
    if self.remote and exists(join(self.directory, name)):
      with open(join(self.local, name), 'wb') as f:
        f.write(read_bytes(join(self.directory, name)))
      self.pushed[name] = _stamp(join(self.local, name))

  def push(self):
    if not self.remote:
      return
    for name in os.listdir(self.local):
      stamp = _stamp(join(self.local, name))
      if self.pushed.get(name) != stamp:
        upload(join(self.local, name), join(self.directory, name))
        self.pushed[name] = stamp

  def close(self):
    if self.remote:
      self.push()
      shutil.rmtree(self.local, ignore_errors=True)


def _stamp(path):
  info = os.stat(path)
  return info.st_size, info.st_mtime_ns

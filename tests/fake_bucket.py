"""A fake gs:// bucket for tests: etils.epath's gs:// backend swapped for one that keeps the
objects in a local directory and, like an object store, refuses to append.

Libraries that open paths themselves (orbax, ArrayRecord) get the same local directory
through zoo.storage.native, so a whole run with a gs:// workdir works offline; every other
read or write must go through zoo.storage (one that bypasses it fails, or leaves a stray
'gs:' directory in the working directory, which the tests check for).
"""

import contextlib
import io
import os
from unittest import mock

from etils.epath import backend as epath_backend
from etils.epath import gpath

from zoo import storage

PREFIX = 'gs://'


class _Backend(type(epath_backend.os_backend)):
  """os-backed, with gs://BUCKET/KEY stored at ROOT/BUCKET/KEY."""

  def __init__(self, root):
    self.root = root

  def local(self, path):
    path = os.fspath(path)
    assert path.startswith(PREFIX), path
    return os.path.join(self.root, path[len(PREFIX):])

  def remote(self, path):
    return PREFIX + os.path.relpath(path, self.root)

  def open(self, path, mode):
    if 'a' in mode or '+' in mode:
      raise io.UnsupportedOperation(f'objects cannot be appended to: {path} ({mode})')
    if 'w' in mode:
      os.makedirs(os.path.dirname(self.local(path)), exist_ok=True)  # no directories in a bucket
    return super().open(self.local(path), mode)

  def exists(self, path):
    return super().exists(self.local(path))

  def isdir(self, path):
    return super().isdir(self.local(path))

  def listdir(self, path):
    return super().listdir(self.local(path))

  def glob(self, path):
    return [self.remote(p) for p in super().glob(self.local(path))]

  def walk(self, top, **kwargs):
    for root, dirs, files in super().walk(self.local(top), **kwargs):
      yield self.remote(root), dirs, files

  def makedirs(self, path, **kwargs):
    super().makedirs(self.local(path), **kwargs)

  def mkdir(self, path, **kwargs):
    super().mkdir(self.local(path), **kwargs)

  def rmtree(self, path):
    super().rmtree(self.local(path))

  def remove(self, path):
    super().remove(self.local(path))

  def rename(self, path, dst):
    super().rename(self.local(path), self.local(dst))

  def replace(self, path, dst):
    super().replace(self.local(path), self.local(dst))

  def copy(self, path, dst, overwrite):
    super().copy(self.local(path), self.local(dst), overwrite)

  def stat(self, path):
    return super().stat(self.local(path))


@contextlib.contextmanager
def bucket(root):
  """Within it, gs://NAME/... paths live under `root`; yields the backend."""
  fake = _Backend(root)
  backends = dict(gpath._PREFIX_TO_BACKEND, gs=fake)  # pylint: disable=protected-access

  def native(path):
    return fake.local(path) if str(path).startswith(PREFIX) else os.path.abspath(path)
  with mock.patch.object(gpath, '_PREFIX_TO_BACKEND', backends), \
      mock.patch.object(storage, 'native', native), \
      mock.patch.object(storage, 'check', lambda path, field: None):
    yield fake

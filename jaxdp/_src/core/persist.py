"""jaxdp's programs, compiled once per machine: `jit` with its own disk cache.

A person asking one question in a new process should not wait for XLA to
compile the programs an earlier process already compiled. JAX's persistent
compilation cache would do it, but turning it on changes the process-wide
JAX configuration (and would cache the user's own programs too), which a
library must not do. So jaxdp keeps its *own* serialized executables, for its
own programs only:

* :func:`jit` is ``jax.jit`` plus a disk cache. Outside any trace, a call
  with a new signature (static values, pytree structure, shapes, dtypes,
  weak types, JAX's tracing configuration) traces and lowers the program as
  ``jax.jit`` would, then looks for its executable on disk under a key that
  hashes the **lowered program text** (StableHLO) with the environment:
  jax and jaxlib versions, jaxdp's version and a hash of its source, the
  x64 flag, ``XLA_FLAGS``, the backend, its platform version, the device
  kind and the CPU's features. Found: it is loaded (milliseconds) instead of
  compiled (seconds). Not found, or any load failure: compiled, then stored
  (written to a temporary file and renamed, so a reader never sees half an
  entry). Keying by the lowered text, not by the function's name, means a
  program is only ever reused for the very same computation: a changed
  constant, closure or monkeypatched global lowers to another text.
* Inside a trace (``jit``, ``vmap``, ``grad``, ``scan`` of the caller), under
  ``jax.disable_jit()``, with arguments placed on a device other than the
  default one, in a process of a multi-process (``jax.distributed``) run, or
  with the cache off, it is exactly ``jax.jit``. (Under ``jax.distributed``
  an executable loaded from disk returned arrays that a second loaded
  executable refused, "CopyArrays only supports destination device list of
  the same size": README's two-process sweep failed whenever the cache was
  warm.)

Location: ``$JAXDP_CACHE_DIR/executables`` (``JAXDP_CACHE_DIR=off`` turns
this cache off), else ``$XDG_CACHE_HOME/jaxdp/xla/executables`` (default
``~/.cache/jaxdp/xla/executables``). Deleting the folder is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, Optional

import jax

from jaxdp._src.core import cache as _cache

_FORMAT = 2             # bump when the entry layout or key changes
_SUBDIR = "executables"
_MIN_COMPILE_SECONDS = 0.2   # quicker compiles are not worth a disk entry
_MAX_ENTRIES = 2000          # beyond this, the least recently used quarter goes
_MEMO_SIZE = 64              # compiled programs kept in memory per function
_lock = threading.Lock()
# Every live function's in-memory table (for clear_memory), held weakly: a
# function made per call (a closure, e.g. one optax transform's update) frees
# its programs with it.
_functions = weakref.WeakSet()


def directory() -> Optional[str]:
  """Where executables are kept, or None when the cache is off."""
  base = _cache.cache_dir()
  return None if base is None else os.path.join(base, _SUBDIR)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
  """SHA-256 of every Python file of the jaxdp package (name and bytes)."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  h = hashlib.sha256()
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in sorted(filenames):
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        h.update(os.path.relpath(path, root).encode())
        with open(path, "rb") as f:
          h.update(f.read())
  return h.hexdigest()


def _cpu_features() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=8)
def _environment(backend: str, x64: bool) -> str:
  """Everything besides the program text that decides what an executable does."""
  import jaxlib  # pylint: disable=g-import-not-at-top
  try:
    from importlib import metadata  # pylint: disable=g-import-not-at-top
    version = metadata.version("jaxdp-accountant")
  except Exception:  # pylint: disable=broad-except
    version = "unknown"
  dev = jax.devices(backend)[0]
  client = dev.client
  parts = [f"format={_FORMAT}", f"jax={jax.__version__}", f"jaxlib={jaxlib.__version__}",
           f"jaxdp={version}", f"source={_source_hash()}", f"x64={x64}",
           f"xla_flags={os.environ.get('XLA_FLAGS', '')}", f"backend={backend}",
           f"platform_version={getattr(client, 'platform_version', '')}",
           f"device_kind={dev.device_kind}", f"devices={jax.device_count(backend)}",
           f"cpu={_cpu_features()}", f"python={sys.version_info[:2]}"]
  return "\n".join(parts)


def _path(lowered) -> Optional[str]:
  folder = directory()
  if folder is None:
    return None
  backend = jax.default_backend()
  # The executable carries the Python structure of its inputs and outputs:
  # two pytrees with the same leaves (say two event classes) lower to the
  # same text, so their structures are part of the key.
  structure = f"in={lowered.in_tree}\nout={lowered.out_tree}"
  text = lowered.as_text()
  key = hashlib.sha256((_environment(backend, bool(jax.config.jax_enable_x64)) + "\n"
                        + structure + "\n" + text).encode()).hexdigest()
  return os.path.join(folder, key[:2], key + ".exe")


def _load(path):
  from jax.experimental import serialize_executable as se  # pylint: disable=g-import-not-at-top
  with open(path, "rb") as f:
    payload, in_tree, out_tree = pickle.load(f)
  exe = se.deserialize_and_load(payload, in_tree, out_tree)
  try:
    os.utime(path)          # recently used: kept by _prune
  except OSError:
    pass
  return exe


def _prune(folder):
  """Keeps the folder under _MAX_ENTRIES entries (least recently used go)."""
  entries = []
  for sub in os.scandir(folder):
    if sub.is_dir():
      entries.extend(e for e in os.scandir(sub.path) if e.name.endswith(".exe"))
  if len(entries) <= _MAX_ENTRIES:
    return
  entries.sort(key=lambda e: e.stat().st_mtime)
  for e in entries[:len(entries) - 3 * _MAX_ENTRIES // 4]:
    try:
      os.unlink(e.path)
    except OSError:
      pass


def _store(path, compiled):
  from jax.experimental import serialize_executable as se  # pylint: disable=g-import-not-at-top
  blob = pickle.dumps(se.serialize(compiled), protocol=pickle.HIGHEST_PROTOCOL)
  folder = os.path.dirname(path)
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(blob)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


class _Entry:
  """A program of the in-memory table: its executable, the disk entry it was
  loaded from (None when compiled here), and whether a call has succeeded."""
  __slots__ = ("exe", "path", "checked")

  def __init__(self, exe, path):
    self.exe, self.path, self.checked = exe, path, path is None


def _jax_cache_on() -> bool:
  from jax._src import compilation_cache  # pylint: disable=g-import-not-at-top
  return bool(compilation_cache.is_persistent_cache_enabled())


def _executable(jitted, args, kwargs):
  """The compiled program for these arguments: loaded from disk, or compiled
  and stored, as an :class:`_Entry`."""
  from jax._src import config as _config  # pylint: disable=g-import-not-at-top
  # Traced as in a plain call: a caller's jax.ensure_compile_time_eval() would
  # run every constant subexpression op by op (one compilation each) while
  # tracing; XLA folds them in the one program instead.
  with _config.eager_constant_folding(False):
    lowered = jitted.lower(*args, **kwargs)
  path = _path(lowered)
  if path is not None and os.path.exists(path):
    try:
      return _Entry(_load(path), path)
    except Exception:  # pylint: disable=broad-except
      pass   # a stale or broken entry: compile again and overwrite it
  start = time.perf_counter()
  compiled = lowered.compile()
  # An executable that JAX's own persistent cache served (when the user turned
  # it on) serializes without its compiled functions (jaxlib 0.10: "Function
  # ... not found" when the copy is called): only fresh compilations are stored.
  if (path is not None and time.perf_counter() - start >= _MIN_COMPILE_SECONDS
      and not _jax_cache_on()):
    try:
      _store(path, compiled)
      _prune(os.path.dirname(os.path.dirname(path)))
    except Exception:  # pylint: disable=broad-except
      pass   # a read-only or full disk only costs the next process a compile
  return _Entry(compiled, None)


def _call(entry, jitted, memo, sig, args, kwargs, dyn_args, dyn_kwargs):
  """Runs the entry; a loaded executable that fails at its first call is
  dropped (memory and disk) and the call goes to ``jax.jit``."""
  if entry.checked:
    return entry.exe(*dyn_args, **dyn_kwargs)
  try:
    out = entry.exe(*dyn_args, **dyn_kwargs)
  except (jax.errors.JaxRuntimeError, TypeError):   # the arguments were traced already:
    memo[sig] = False                               # a broken or mismatched entry
    try:
      os.unlink(entry.path)
    except OSError:
      pass
    return jitted(*args, **kwargs)
  entry.checked = True
  return out


def default_placed(leaves) -> bool:
  """No tracer among the leaves, every jax.Array on the default device, and
  a single-process run (module docstring)."""
  if jax.process_count() != 1:
    return False
  default = None
  for leaf in leaves:
    if isinstance(leaf, jax.core.Tracer):
      return False
    if isinstance(leaf, jax.Array):
      devs = leaf.devices()
      if len(devs) != 1:
        return False
      if default is None:
        default = jax.devices()[0] if jax.config.jax_default_device is None else None
      if default is None or next(iter(devs)) != default:
        return False
  return True


def jit(fun: Optional[Callable] = None, /, **jit_kwargs: Any):
  """``jax.jit(fun, **jit_kwargs)`` whose executables persist across processes.

  Use it exactly like ``jax.jit`` (also as ``functools.partial(jit,
  static_argnames=...)``). See the module docstring for when the disk cache
  serves a call; otherwise the call is ``jax.jit``'s. The returned function
  forwards ``lower``, ``trace``, ``eval_shape`` and ``clear_cache`` to the
  underlying ``jax.jit`` object.
  """
  if fun is None:
    return functools.partial(jit, **jit_kwargs)
  jitted = jax.jit(fun, **jit_kwargs)
  try:
    import inspect  # pylint: disable=g-import-not-at-top
    from jax._src.api_util import infer_argnums_and_argnames  # pylint: disable=g-import-not-at-top
    nums, names = infer_argnums_and_argnames(
        inspect.signature(fun), jit_kwargs.get("static_argnums"),
        jit_kwargs.get("static_argnames"))
  except Exception:  # pylint: disable=broad-except
    return jitted            # an unusual signature: plain jax.jit
  nums, names = frozenset(nums), frozenset(names)
  memo = {}

  @functools.wraps(fun)
  def wrapped(*args, **kwargs):
    if directory() is None or jax.config.jax_disable_jit:
      return jitted(*args, **kwargs)   # under jax.disable_jit(): fun, op by op
    dyn_args = tuple(a for i, a in enumerate(args) if i not in nums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in names}
    leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
    if not default_placed(leaves):
      return jitted(*args, **kwargs)
    try:
      static = (tuple((i, a) for i, a in enumerate(args) if i in nums),
                tuple(sorted((k, v) for k, v in kwargs.items() if k in names)))
      avals = tuple(jax.api_util.shaped_abstractify(x) for x in leaves)
      from jax._src import config as _config  # pylint: disable=g-import-not-at-top
      sig = (static, tree, avals, _config.trace_context())
      exe = memo.get(sig)
    except Exception:  # pylint: disable=broad-except
      return jitted(*args, **kwargs)    # unhashable static values: jax.jit decides
    if exe is None:
      with _lock:
        exe = memo.get(sig)
        if exe is None:
          try:
            exe = _executable(jitted, args, kwargs)
          except Exception:  # pylint: disable=broad-except
            exe = False      # jax.jit raises the user's error, or serves it
          if len(memo) >= _MEMO_SIZE:
            memo.pop(next(iter(memo)))
          memo[sig] = exe
    if exe is False:
      return jitted(*args, **kwargs)
    return _call(exe, jitted, memo, sig, args, kwargs, dyn_args, dyn_kwargs)

  for attr in ("lower", "trace", "eval_shape"):
    if hasattr(jitted, attr):
      setattr(wrapped, attr, getattr(jitted, attr))

  def clear_cache():
    memo.clear()
    jitted.clear_cache()

  wrapped.clear_cache = clear_cache
  wrapped._jitted = jitted  # pylint: disable=protected-access
  wrapped._persist_memo = memo  # pylint: disable=protected-access
  _functions.add(wrapped)
  return wrapped


def clear_memory():
  """Drops the compiled programs every :func:`jit` function keeps in memory
  (as ``jax.clear_caches()`` does for ``jax.jit``); the disk stays."""
  for function in list(_functions):
    function._persist_memo.clear()  # pylint: disable=protected-access

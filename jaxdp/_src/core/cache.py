"""Persistent XLA compilation cache for jaxdp's programs.

A person asking one question should not wait for XLA to recompile the same
programs in every new process.  ``jaxdp.enable_compilation_cache()`` turns
JAX's persistent compilation cache on (an explicit call: library functions
never change the user's JAX configuration on their own); the ``jaxdp``
command calls it at start-up.

Location: the environment variable ``JAXDP_CACHE_DIR`` if set (``off``
disables the cache), else ``$XDG_CACHE_HOME/jaxdp/xla`` (default
``~/.cache/jaxdp/xla``).
"""

from __future__ import annotations

import os
from typing import Optional

import jax

__all__ = ["enable_compilation_cache", "cache_dir"]

ENV = "JAXDP_CACHE_DIR"


def cache_dir(path: Optional[str] = None) -> Optional[str]:
  """The cache directory to use: ``path``, else ``$JAXDP_CACHE_DIR``, else the
  user cache directory; ``None`` when disabled (``off``)."""
  if path is None:
    path = os.environ.get(ENV)
  if path is None or path == "":
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "jaxdp", "xla")
  if str(path).strip().lower() == "off":
    return None
  return os.path.abspath(os.path.expanduser(str(path)))


def enable_compilation_cache(path: Optional[str] = None) -> Optional[str]:
  """Turns on JAX's persistent compilation cache for every compiled program.

  This changes the process-wide JAX configuration (``jax_compilation_cache_dir``
  and ``jax_persistent_cache_min_compile_time_secs = 0``), so jaxdp only does
  it when asked: call it once at the start of a script, or use the ``jaxdp``
  command, which calls it.

  Args:
    path: cache directory; default ``$JAXDP_CACHE_DIR`` or
      ``~/.cache/jaxdp/xla``; ``"off"`` leaves the configuration untouched.

  Returns:
    The directory in use, or ``None`` when disabled.
  """
  directory = cache_dir(path)
  if directory is None:
    return None
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return directory

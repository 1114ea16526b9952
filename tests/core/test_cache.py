"""The persistent compilation cache switch (issue 15): location rules and effect."""

import os

import jax

import jaxdp
from jaxdp._src.core import cache as _cache


def test_cache_dir_rules(monkeypatch, tmp_path):
  monkeypatch.delenv("JAXDP_CACHE_DIR", raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert _cache.cache_dir() == os.path.join(str(tmp_path), "jaxdp", "xla")
  monkeypatch.setenv("JAXDP_CACHE_DIR", str(tmp_path / "here"))
  assert _cache.cache_dir() == str(tmp_path / "here")
  monkeypatch.setenv("JAXDP_CACHE_DIR", "off")
  assert _cache.cache_dir() is None
  assert _cache.cache_dir(str(tmp_path / "explicit")) == str(tmp_path / "explicit")


def test_enable_sets_and_off_leaves_config(monkeypatch, tmp_path):
  before = (jax.config.jax_compilation_cache_dir,
            jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes)
  try:
    assert jaxdp.enable_compilation_cache("off") is None
    assert jax.config.jax_compilation_cache_dir == before[0]
    got = jaxdp.enable_compilation_cache(str(tmp_path / "c"))
    assert got == str(tmp_path / "c") and os.path.isdir(got)
    assert jax.config.jax_compilation_cache_dir == got
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
  finally:
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", before[2])

"""Tests for jaxdp.sweep: chunking, grids, sharded == single device."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jaxdp
from jaxdp import sweep

ORDERS = np.array([2.0, 3, 4, 6, 8, 16, 32, 64])


def test_grid_shapes():
  g = sweep.grid(q=[0.01, 0.02], sigma=np.linspace(0.5, 2, 5), steps=[10, 100, 1000])
  assert g["q"].shape == (2, 1, 1) and g["sigma"].shape == (1, 5, 1)
  assert g["steps"].shape == (1, 1, 3)


def test_epsilon_matches_api_across_chunks():
  g = sweep.grid(q=np.geomspace(1e-4, 0.5, 7), sigma=np.linspace(0.5, 3, 11), steps=[1, 50, 999])
  # chunk smaller than the grid: several chunks and a padded last one
  e = sweep.epsilon(g["q"], g["sigma"], g["steps"], 1e-5, orders=ORDERS, chunk_size=64)
  ref = jaxdp.epsilon(g["q"], g["sigma"], g["steps"], 1e-5, orders=ORDERS)
  assert e.shape == (7, 11, 3)
  np.testing.assert_allclose(e, ref, rtol=1e-13)
  d = sweep.delta(g["q"], g["sigma"], g["steps"], 2.0, orders=ORDERS, chunk_size=64)
  np.testing.assert_allclose(d, jaxdp.delta(g["q"], g["sigma"], g["steps"], 2.0, orders=ORDERS),
                             rtol=1e-13)


def test_pruned_orders_equal_sharded_kernels():
  """One device uses jaxdp.epsilon's pruned order search; explicit devices
  the sharded kernels that evaluate every order: same values."""
  import jax
  orders = np.concatenate([1.0 + np.arange(1, 40) / 8.0, np.arange(6, 64), [128, 512]])
  g = sweep.grid(q=np.geomspace(1e-4, 0.5, 6), sigma=np.linspace(0.5, 3, 7), steps=[10, 5000])
  args = (g["q"], g["sigma"], g["steps"], 1e-6)
  pruned = sweep.epsilon(*args, orders=orders, chunk_size=32)
  every = sweep.epsilon(*args, orders=orders, chunk_size=32, devices=jax.devices()[:1])
  np.testing.assert_allclose(pruned, every, rtol=1e-9)


def test_calibrated_sweeps_chunked_and_progress(capsys):
  g = sweep.grid(target=[1.0, 4.0], q=[0.001, 0.01, 0.1])
  s = sweep.sigma(g["target"], 1e-5, g["q"], 1000, orders=ORDERS, chunk_size=4, progress=True)
  assert s.shape == (2, 3)
  assert np.all(jaxdp.epsilon(g["q"], s, 1000, 1e-5, orders=ORDERS) <= g["target"])
  t = sweep.steps(g["target"], 1e-5, g["q"], 2.0, orders=ORDERS, chunk_size=4)
  assert np.all(jaxdp.epsilon(g["q"], 2.0, t, 1e-5, orders=ORDERS) <= g["target"])
  qq = sweep.sampling_rate(g["target"], 1e-5, 2.0, 1000, orders=ORDERS, chunk_size=4)
  assert np.all(jaxdp.epsilon(qq, 2.0, 1000, 1e-5, orders=ORDERS) <= g["target"])


def test_validation():
  with pytest.raises(ValueError, match="sigma"):
    sweep.epsilon(0.1, -1.0, 10, 1e-5, orders=ORDERS)


_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, jax
    from jaxdp import sweep
    assert len(jax.devices()) == 4, jax.devices()
    orders = np.array([2.0, 3, 4, 8, 16, 32])
    g = sweep.grid(q=np.geomspace(1e-4, 0.5, 9), sigma=np.linspace(0.5, 3, 13), steps=[7, 700])
    args = (g["q"], g["sigma"], g["steps"], 1e-5)
    multi = sweep.epsilon(*args, orders=orders, chunk_size=96)
    single = sweep.epsilon(*args, orders=orders, chunk_size=96, devices=jax.devices()[:1])
    t = np.array([0.5, 1.0, 2.0, 4.0, 8.0, 3.0, 1.5])
    s_multi = sweep.sigma(t, 1e-5, 0.01, 500, orders=orders)
    s_single = sweep.sigma(t, 1e-5, 0.01, 500, orders=orders, devices=jax.devices()[:1])
    json.dump(dict(eps=float(np.max(np.abs(multi - single) / single)),
                   sig=float(np.max(np.abs(s_multi - s_single) / s_single))), sys.stdout)
""")


def test_sharded_equals_single_device():
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
  env["JAX_PLATFORMS"] = "cpu"
  out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  diffs = json.loads(out.stdout.strip().splitlines()[-1])
  assert diffs["eps"] <= 1e-14
  assert diffs["sig"] <= 1e-12

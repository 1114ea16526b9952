"""The float32 quadrature round-off bound of jaxdp.rdp (issue 35, point 2).

The float32 path of the fractional-order quadrature used to add a flat,
measured 2e-3 to log(A_α - 1). It now adds a proven first-order bound per node
(rdp_quadrature._f32_node_bound), per weight (rdp_quadrature._f32_weight_bound) and for the sum
(rdp_quadrature._f32_sum_bound); docs/mathematics.md ("Float32 quadrature round-off")
has the proof. These tests check (1) the proof's one measured input, the
float32 accuracy of XLA's exp/log/log1p/expm1, with a safety factor ≥ 2;
(2) per node, the bound covers the float32 error against mpmath and is not
loose by more than a stated factor; (3) end to end, compiled float32 RDP
values are upper bounds of mpmath's (tests/reference.py) over the whole
domain. References are mpmath / float64 NumPy, never the code under test.
"""

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxdp import rdp
from reference import ref_sgm_rdp
from jaxdp._src.kernels import rdp_quadrature

U = 2.0 ** -24
SAFETY = 2.0   # assumed bound / worst measured error must be at least this


def _sample(lo, hi, n, seed):
  rng = np.random.default_rng(seed)
  x = np.concatenate([np.linspace(lo, hi, n // 2), rng.uniform(lo, hi, n // 2), [lo, hi]])
  return np.unique(x.astype(np.float32))


def _max_rel_err(fn32, fn64, x):
  got = np.asarray(jax.jit(fn32)(jnp.asarray(x)), np.float64)
  ref = fn64(x.astype(np.float64))
  ok = ref != 0
  return float(np.max(np.abs(got[ok] - ref[ok]) / np.abs(ref[ok])) / U)


def _pow10(lo, hi, n, seed):
  return (np.float32(10.0) ** _sample(lo, hi, n, seed)).astype(np.float32)


def test_float32_function_accuracy_assumption():
  """XLA's float32 exp, log, log1p and expm1 are within rdp_quadrature._F32_TAU / SAFETY units of roundoff (u = 2^-24) over
  the arguments the quadrature uses (normal range; dense grid incl. edges)."""
  n = 200_000
  small = np.concatenate([_pow10(-30, 0, n, 1), -_pow10(-30, -1e-4, n, 2)])
  cases = {
      "exp": [(jnp.exp, np.exp, _sample(-87.0, 88.0, n, 3))],
      "log": [(jnp.log, np.log, np.concatenate([_pow10(-37.9, 38, n, 4), _sample(0.5, 2.0, n, 5)]))],
      # The float32 quadrature uses XLA's log1p primitive (rdp_quadrature.quadrature_log1p), not the
      # compensated nx.log1p, whose correction a compiled program can lose.
      "log1p": [(jnp.log1p, np.log1p, np.concatenate([small, _pow10(0, 30, n, 6)]))],
      "expm1": [(jnp.expm1, np.expm1, np.concatenate([_sample(-87.0, 88.0, n, 7), small]))],
  }
  worst = {}
  for name, rows in cases.items():
    worst[name] = max(_max_rel_err(f32, f64, x) for f32, f64, x in rows)
    assert worst[name] * SAFETY <= rdp_quadrature._F32_TAU[name], (name, worst[name])
  # Not vacuous: the functions really round (≥ 0.4 u somewhere).
  assert min(worst.values()) >= 0.4, worst


def _mp_node(q, s, a, z):
  """Exact log(φ_σ(z)·f(u(z))) at the float32 inputs (mpmath, 40 digits)."""
  with mp.workdps(40):
    q, s, a, z = (mp.mpf(float(v)) for v in (q, s, a, z))
    u = q * mp.expm1((2 * z - 1) / (2 * s * s))
    f = mp.power(1 + u, a) - 1 - a * u
    if f <= 0:
      return -math.inf
    return float(mp.log(f) - z * z / (2 * s * s) - mp.log(s) - mp.log(2 * mp.pi) / 2)


def _node_values(q, s, a, z, with_bound):
  """Float32 node log-values of rdp_quadrature._log_integrand_f, compiled, with or
  without the proven bound (patched to 0 for the raw value)."""
  saved = rdp_quadrature._f32_node_bound
  if not with_bound:
    rdp_quadrature._f32_node_bound = lambda *args, **kw: 0.0
  try:
    def run(lq, l1, s, a, z):
      o = rdp_quadrature._order_constants(a[:, None])
      log_norm = (jnp.log(s) + 0.5 * math.log(2 * math.pi))[:, None]
      return rdp_quadrature._log_integrand_f(z, o, (s * s)[:, None], lq[:, None], l1[:, None], log_norm)
    lq = np.log(q.astype(np.float64)).astype(np.float32)
    l1 = np.log1p(-q.astype(np.float64)).astype(np.float32)
    return np.asarray(jax.jit(run)(lq, l1, s, a, z), np.float64)
  finally:
    rdp_quadrature._f32_node_bound = saved


# The whole legal domain: q ∈ (0, 1), σ small to large, fractional α from
# 1.01 to 4000 (q = 1 and q = 0 are exact special cases of _finish).
_Q = [1e-6, 1e-3, 0.05, 0.5, 0.97]
_S = [0.35, 1.1, 6.0, 45.0]
_A = [1.01, 1.5, 7.3, 60.5, 700.5, 4000.5]
# Bound / measured error, per (q, σ, α): stated limit on looseness.
LOOSENESS = 2000.0


def _grid():
  q, s, a = (np.array(v, np.float32) for v in zip(*[(q, s, a) for q in _Q for s in _S for a in _A]))
  return q, s, a


def _nodes_for(q, s, a, m=24):
  """m nodes per element around both modes and the low-z region."""
  z = []
  for qi, si, ai in zip(q, s, a):
    r = math.sqrt(2 * 64.0) * float(si)
    mode = float(ai)   # the high mode sits near z = α
    z.append(np.concatenate([np.linspace(-r, 2 + r, m // 2), np.linspace(mode - r, mode + r, m // 2)]))
  return np.array(z, np.float32)


def test_float32_node_bound_holds_and_is_stated_tight():
  """Per node: raw float32 (compiled) + proven bound ≥ exact (mpmath), and
  per element the largest bound is ≤ LOOSENESS × the largest raw error."""
  q, s, a = _grid()
  z = _nodes_for(q, s, a)
  raw = _node_values(q, s, a, z, with_bound=False)
  bounded = _node_values(q, s, a, z, with_bound=True)
  bound = bounded - raw
  exact = np.array([[_mp_node(q[i], s[i], a[i], zz) for zz in z[i]] for i in range(len(q))])
  live = np.isfinite(exact) & np.isfinite(raw) & (exact > -1e4)
  assert live.sum() > 0.8 * live.size
  err = np.where(live, raw - exact, 0.0)
  # Soundness: the bound covers the error below (where it matters).
  under = live & (bounded < exact)
  assert not under.any(), [(q[i], s[i], a[i], z[i, j], err[i, j], bound[i, j])
                           for i, j in zip(*np.nonzero(under))][:5]
  assert np.all(bound[live] >= np.abs(err[live]) - 4 * U * np.abs(exact[live]))
  ratio = np.max(np.where(live, bound, 0), axis=1) / np.maximum(
      np.max(np.abs(err), axis=1), 64 * U)
  assert ratio.max() <= LOOSENESS, (ratio.max(), np.argmax(ratio))


# The third case is test_soundness's F32_FOUND point: with the compensated
# nx.log1p a compiled float32 program lost its correction there and read
# 1e-5 below mpmath even under the proven bound (4.3e-4 above with the
# log1p primitive).
_E2E = [(1e-6, 0.4, 3000.5), (2.6e-4, 5.58, 351.5), (0.0013131807, 3.7639222, 115.330444),
        (0.01, 1.0, 1.01),
        (0.05, 0.6, 7.3), (0.5, 20.0, 60.5), (0.97, 2.0, 2.5), (0.004, 48.0, 4000.5)]
_E2E_SLOW = [(q, s, a) for q in (1e-5, 0.002, 0.2) for s in (0.4, 1.5, 12.0, 50.0)
             for a in (1.05, 3.5, 40.5, 900.5)]


def _e2e(cases):
  q, s, a = (np.array(v, np.float32) for v in zip(*cases))
  ours = np.asarray(jax.jit(rdp.sampled_gaussian)(q, s, jnp.asarray(a)), np.float64)
  ref = np.array([float(ref_sgm_rdp(*(float(v) for v in c), dps=30))
                  for c in zip(q, s, a)])
  rel = ours / ref - 1.0
  assert np.all(rel >= 0), [(cases[i], rel[i]) for i in np.nonzero(rel < 0)[0]]
  # Looseness of the proven bound (stated limits): for α ≤ 100 typically
  # ~1e-4 (the flat 2e-3 made it ≥ 2.05e-3 everywhere: the median check
  # fails on that code) and ≤ 3e-3 (α → 1 at small σ: 2.6e-3 found in a
  # 16k-point scan); ≤ 2% up to α = 4000.5 (the scan: 3.6% at α ≈ 8000,
  # where the flat margin's code gave 2.2%).
  small = a <= 100
  assert np.median(rel[small]) <= 1e-3, rel
  assert rel[small].max() <= 3e-3, rel
  assert rel.max() <= 2e-2, rel
  return rel


def test_float32_traced_rdp_is_an_upper_bound_of_mpmath():
  """Compiled float32 traced-order RDP ≥ mpmath, across the domain's corners."""
  _e2e(_E2E)


@pytest.mark.slow
def test_float32_traced_rdp_is_an_upper_bound_of_mpmath_grid():
  _e2e(_E2E_SLOW)

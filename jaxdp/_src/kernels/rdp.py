"""Rényi differential privacy of Gaussian mechanisms and RDP → (ε, δ) conversions.

Kernels here are pure, jittable and broadcast their array arguments together
like ``jax.scipy.special``. They compute in the dtype of their inputs: float64
when called from the host-level entry points (``jaxdp.epsilon`` & co. scope
``jax_enable_x64``), float32 inside a user's jit with x64 off. Values are
inflated by a relative 256 ulps, and every log-term of the sampled-Gaussian
sums carries a rounding allowance proportional to its parts' magnitudes
(:func:`jaxdp._src.core.numerics.rounding_allowance`): where α(α-1)/(2σ²) and α·log q cancel (large α,
small q) float32 rounding reaches ~1e-3 relative, so there the float32 value
is up to ~1% looser (α ≳ 1000) but stays an upper bound. Float32 quadrature
(traced or fractional orders) instead adds a proven a-priori bound on its
round-off per node, weight and sum
(:func:`jaxdp._src.kernels.rdp_quadrature._f32_node_bound`; proof in
docs/mathematics.md, "Float32 quadrature round-off"), which assumes only
correctly rounded arithmetic and XLA's float32 exp/log/log1p/expm1 within the
tested ``_F32_TAU`` units of roundoff.

Mathematics: Mironov, Talwar & Zhang, "Rényi Differential Privacy of the
Sampled Gaussian Mechanism" (2019), §3. For Poisson sampling with rate q and
noise multiplier σ (add/remove neighbours, L2 sensitivity 1) the RDP at order
α is ε(α) = log(A_α)/(α-1) with

    A_α = E_{z~N(0,σ²)} [(1 - q + q·exp((2z-1)/(2σ²)))^α]          (Thm 4/5, eq. 11)

(Theorem 5 shows A_α ≥ B_α, so A_α is the binding direction).

The exact binomial sums live in :mod:`jaxdp._src.kernels.rdp_binomial`, the
quadrature and its float32 bounds in :mod:`jaxdp._src.kernels.rdp_quadrature`,
the conversions (re-exported here) in :mod:`jaxdp._src.kernels.rdp_convert`,
the shared safety factor and dtype helpers in
:mod:`jaxdp._src.kernels.rdp_common`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.rdp_binomial import (log_a_minus_1_binomial,
                                             log_a_minus_1_binomial_elementwise)
from jaxdp._src.kernels.rdp_common import gaussian_rdp, result_float_dtype, safety_factor
from jaxdp._src.kernels.rdp_convert import (to_delta, to_delta_refined, to_epsilon,
                                            to_epsilon_refined)
from jaxdp._src.kernels.rdp_quadrature import (NODES_PER_WINDOW, quadrature_log1p,
                                               log_a_minus_1_quadrature,
                                               log_a_minus_1_quadrature_impl)
from jaxdp._src.core import persist

__all__ = [
    "DEFAULT_ORDERS",
    "sampled_gaussian",
    "gaussian",
    "sampled_gaussian_bound",
    "to_epsilon",
    "to_delta",
    "to_epsilon_refined",
    "to_delta_refined",
    "dpsgd_rdp",
    "dpsgd_epsilon",
    "dpsgd_delta",
]

# Orders serving both tiny and large ε: dense near 1 (large ε / few steps),
# every 0.1 up to 11 and all integers to 64 (a superset of dp_accounting's
# default RDP orders, so the grid minimum is never above its), then a
# geometric tail up to 4096 (tiny ε, huge T). The in-jit read-out
# (:func:`to_epsilon_refined`) also bounds every order between two grid
# orders by the chord of (α-1)·ε(α).
DEFAULT_ORDERS = np.unique(np.concatenate([
    1.0 + np.array([0.01, 0.02, 0.05]),
    np.round(1.0 + np.arange(1, 100) / 10.0, 12),
    np.array([1.75, 2.25, 2.75]),
    np.arange(11.0, 65.0),
    np.array([80.0, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
              1024, 1536, 2048, 3072, 4096]),
]))
DEFAULT_ORDERS.setflags(write=False)

# Integer orders up to this use the exact binomial sum; beyond, quadrature.
_MAX_BINOMIAL_ORDER = 4096
# Enough when every σ ≥ 0.5 (error ≤ 1e-12 there; chosen only for concrete σ).
_NODES_WIDE = 40


# --------------------------------------------------------------------------
# Public kernels
# --------------------------------------------------------------------------


def _quadrature_safety(sigma, exact, dtype, nodes, xp=jnp):
  """Relative inflation covering the quadrature error (measured against a
  600-node reference over q ∈ [1e-8, 1], α ∈ (1, 10⁴], with a 10× margin).
  64 nodes/window: ≤ 1e-12 for σ ≥ 0.3, ≤ 2e-8 for σ ∈ [0.2, 0.3), ≤ 5e-7
  below. 40 nodes/window (used only when every σ ≥ 0.5): ≤ 1e-12 for
  σ ≥ 0.5 (a blunt 1e-3 allowance guards any other use). Integer orders
  (exact sums) only get the rounding factor."""
  base = safety_factor(dtype)
  if nodes >= NODES_PER_WINDOW:
    extra = xp.where(sigma >= 0.3, 0.0, xp.where(sigma >= 0.2, 2e-7, 5e-6))
  else:
    extra = xp.where(sigma >= 0.5, 0.0, 1e-3)
  return xp.where(exact, base, base + extra)


def _exact_orders(alpha_np):
  """Mask of concrete orders computed by the exact binomial sum."""
  return np.isfinite(alpha_np) & (alpha_np == np.floor(alpha_np)) & (alpha_np >= 2) & (
      alpha_np <= _MAX_BINOMIAL_ORDER)


def _finish(log_am1, q, sigma, alpha, exact=False, nodes=NODES_PER_WINDOW, xp=jnp):
  """RDP from log(A_α - 1), with the exact special cases and safety factor."""
  dtype = log_am1.dtype
  beta = alpha - 1.0
  rdp = nx.softplus(log_am1, xp) / xp.where(beta > 0, beta, 1.0)
  safety = _quadrature_safety(sigma, exact, dtype, nodes, xp)
  rdp = xp.maximum(rdp, 0.0) * safety
  # q = 1 is exact, but gets the same inflation so ε stays monotone as q → 1.
  rdp = xp.where(q == 1.0, alpha / (2.0 * sigma * sigma) * safety, rdp)
  rdp = xp.where(q == 0.0, 0.0, rdp)
  rdp = xp.where(alpha == xp.inf, xp.where(q == 0.0, 0.0, xp.inf), rdp)
  rdp = xp.where(beta > 0, rdp, xp.nan)
  return rdp.astype(dtype)


def _prep(q, sigma, xp=jnp):
  q = xp.asarray(q)
  sigma = xp.asarray(sigma)
  dtype = result_float_dtype(q, sigma) if xp is jnp else np.result_type(q, sigma, np.float64)
  q = q.astype(dtype)
  sigma = sigma.astype(dtype)
  qs = xp.clip(q, 0.0, 1.0)
  log_q = nx.safe_log(qs, xp)
  log_1mq = nx.safe_log(1.0 - qs, xp)
  log_1mq = xp.where(qs < 0.5, quadrature_log1p(-xp.minimum(qs, 0.5), xp), log_1mq)
  return q, sigma, log_q, log_1mq, dtype


def sampled_gaussian(q, sigma, alpha, *, _nodes=None):
  """RDP ε(α) of one step of the Poisson-sampled Gaussian mechanism.

  ε(α) = log(A_α)/(α-1) with A_α as in the module docstring (Mironov, Talwar
  & Zhang 2019, §3). Integer orders α ≤ 4096 given as concrete values use the
  exact binomial sum (§3.3, Case I) over only the non-negative terms of
  A_α - 1; every other order (fractional, larger, or traced α) uses a windowed
  trapezoidal quadrature of A_α - 1 = E[(1+u)^α - 1 - αu] that converges for
  every (q, σ, α), including α → 1 and small σ where the §3.3 series stalls.
  Both paths agree with an mpmath reference to ~1e-12 relative in float64.

  Special values: q = 0 → 0; q = 1 → α/(2σ²); α = ∞ → ∞ (0 if q = 0);
  α ≤ 1 → NaN (undefined). Values are inflated by a relative
  max(256·eps(dtype), 4e-12) — plus a measured quadrature allowance for
  σ < 0.3 on the quadrature path (2e-7, 5e-6 below σ = 0.2) — so they are
  upper bounds despite rounding and quadrature error. Near the high mode
  the log-terms' parts α(α-1)/(2σ²) and α·log q reach ~10⁴ and cancel, so
  one ulp of log q is amplified α-fold (float32: ~1e-3 relative); each
  log-term is raised by a rounding allowance for its parts' magnitudes,
  which keeps float32 values upper bounds at the price of up to ~1% extra
  looseness there (α ≳ 1000, ``tests/package/test_soundness.py``); float64 gives
  up ~1e-11 at most. Float32 quadrature adds a proven bound on its
  round-off to log(A_α - 1) (``_f32_node_bound``: ≲ 2e-4 relative in RDP
  for α ≤ 100, up to ~1.6% at α ~ 4000), in place of the flat measured 2e-3
  it used to add.
  Quadrature uses 64 nodes per window, 40 when every concrete σ ≥ 0.5.

  Args:
    q: sampling rate(s) in [0, 1].
    sigma: noise multiplier(s) > 0 (noise std / L2 sensitivity).
    alpha: Rényi order(s) > 1. Concrete (NumPy/Python) orders take the fast
      exact path for integers; traced orders are supported (quadrature).

  Returns:
    Array of RDP values, the broadcast shape of ``(q, sigma, alpha)``.
  """
  if nx.is_concrete(alpha):
    alpha_np = np.asarray(alpha, np.float64)
    nodes = _nodes or _nodes_for(sigma)
    return _static_kernel(alpha_np.shape, tuple(alpha_np.ravel().tolist()), nodes)(q, sigma)
  return _traced_kernel(q, sigma, alpha, _nodes or _nodes_for(sigma))


def _nodes_for(sigma) -> int:
  """Quadrature nodes per window: fewer when every (concrete) σ ≥ 0.5."""
  if nx.is_concrete(sigma):
    s = np.asarray(sigma)
    if s.size and np.all(s >= 0.5):
      return _NODES_WIDE
  return NODES_PER_WINDOW


@functools.lru_cache(maxsize=128)
def _static_kernel(shape, values, nodes):
  """Jitted program for one concrete order array (compiled once per shape)."""
  alpha_np = np.asarray(values, np.float64).reshape(shape)

  def run(q, sigma):
    q, sigma, log_q, log_1mq, dtype = _prep(q, sigma)
    return _sampled_gaussian_static(q, sigma, log_q, log_1mq, alpha_np, dtype, nodes)

  return persist.jit(run)


@functools.partial(persist.jit, static_argnames=("nodes",))
def _traced_kernel(q, sigma, alpha, nodes):
  return quadrature_rdp(q, sigma, alpha, nodes)


def quadrature_rdp(q, sigma, alpha, nodes, xp=jnp):
  """Per-step RDP at any real orders by quadrature (the path of traced orders).

  Args:
    q, sigma, alpha: broadcastable arrays (α > 1 real).
    nodes: quadrature nodes per window.
    xp: ``jnp`` (jittable) or ``numpy`` (host, no compilation).

  Returns:
    Rounded-up RDP values, the broadcast shape.
  """
  q, sigma, log_q, log_1mq, dtype = _prep(q, sigma, xp)
  alpha = xp.asarray(alpha).astype(dtype)
  log_am1 = log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes, xp)
  return _finish(log_am1, q, sigma, alpha, nodes=nodes, xp=xp)


def _outer_layout(q_shape, s_shape, a_shape):
  """True when α varies only along axes where q and σ are constant."""
  k = len(a_shape)
  for shp in (q_shape, s_shape):
    tail = shp[max(len(shp) - k, 0):]
    if any(d != 1 for d in tail):
      return False
  return True


def _sampled_gaussian_static(q, sigma, log_q, log_1mq, alpha_np, dtype, nodes):
  """Concrete orders: exact sums for integer orders, bucketed by size."""
  if _outer_layout(q.shape, sigma.shape, alpha_np.shape):
    k = alpha_np.ndim
    base_shape = np.broadcast_shapes(q.shape, sigma.shape)
    lead = base_shape[:max(len(base_shape) - k, 0)]
    flat = lambda x: jnp.broadcast_to(x, base_shape).reshape(-1)
    uniq, inverse = np.unique(alpha_np.reshape(-1), return_inverse=True)
    table = _log_a_minus_1_orders(flat(log_q), flat(log_1mq), flat(sigma), uniq, nodes)
    log_am1 = table[:, inverse].reshape(lead + alpha_np.shape)
    out_shape = np.broadcast_shapes(base_shape, alpha_np.shape)
    q_b = jnp.broadcast_to(q, out_shape)
    s_b = jnp.broadcast_to(sigma, out_shape)
    alpha_b = np.broadcast_to(alpha_np, out_shape)
    return _finish(log_am1.reshape(out_shape), q_b, s_b, jnp.asarray(alpha_b, dtype),
                   _exact_orders(alpha_b), nodes)
  # General broadcasting: every element may carry its own order. Integer
  # orders are summed exactly per element (masked to α), bucketed by size;
  # all other orders share one elementwise quadrature.
  shape = np.broadcast_shapes(q.shape, sigma.shape, alpha_np.shape)
  alpha_full = np.broadcast_to(alpha_np, shape).reshape(-1)
  b = lambda x: jnp.broadcast_to(x, shape).reshape(-1)
  qf, sf, lqf, l1f = b(q), b(sigma), b(log_q), b(log_1mq)
  exact = _exact_orders(alpha_full)
  pieces, positions = [], []
  for pos in _integer_buckets(alpha_full):
    a = jnp.asarray(alpha_full[pos], dtype)
    kmax = int(alpha_full[pos].max())
    per = max(1, _CHUNK_TERMS // kmax)
    fn = lambda x, kmax=kmax: log_a_minus_1_binomial_elementwise(*x, kmax)
    pieces.append(_map_rows(fn, (lqf[pos], l1f[pos], sf[pos], a), pos.size, per))
    positions.append(pos)
  pos = np.nonzero(~exact)[0]
  if pos.size:
    a = jnp.asarray(np.where(np.isfinite(alpha_full[pos]) & (alpha_full[pos] > 1), alpha_full[pos], 2.0), dtype)
    per = max(1, _CHUNK_TERMS // (2 * nodes))
    pieces.append(_map_rows(lambda x: log_a_minus_1_quadrature(*x, nodes=nodes), (lqf[pos], l1f[pos], sf[pos], a),
                            pos.size, per))
    positions.append(pos)
  perm = np.empty(alpha_full.size, dtype=np.int64)
  perm[np.concatenate(positions)] = np.arange(alpha_full.size)
  log_am1 = jnp.concatenate(pieces)[perm] if pieces else jnp.zeros((0,), dtype)
  out = _finish(log_am1, qf, sf, jnp.asarray(alpha_full, dtype), exact, nodes)
  return out.reshape(shape)


def _integer_buckets(orders):
  """Index arrays of the exactly summed orders, one per non-empty size bucket."""
  exact = _exact_orders(orders)
  lo = 1
  for hi in _BUCKETS:
    sel = np.nonzero(exact & (orders > lo) & (orders <= hi))[0]
    lo = hi
    if sel.size:
      yield sel


# Upper ends of the integer-order buckets (few buckets: each costs compile time).
_BUCKETS = (16, 64, 256, 1024, 4096)
# Work elements per chunk (≈ 32 MiB of float64 terms).
_CHUNK_TERMS = 1 << 22
# Binomial sums run fastest in cache-sized chunks (≈ 2 MiB of terms).
_CHUNK_TERMS_BINOMIAL = 1 << 18


def _map_rows(fn, xs, n, per):
  """fn over rows of xs, in chunks of ``per`` rows when n is large."""
  if n <= per:
    return fn(xs)
  return jax.lax.map(lambda row: fn(tuple(v[None] for v in row))[0], xs, batch_size=per)


def _log_a_minus_1_orders(lq, l1, s, orders, nodes):
  """log(A_α - 1) of shape (E, len(orders)) for unique concrete orders."""
  return _orders_kernel(tuple(float(o) for o in orders), nodes)(lq, l1, s)


@functools.lru_cache(maxsize=64)
def _orders_kernel(orders: tuple, nodes: int):
  """One jitted program per order set (compiled once, cached)."""
  orders = np.asarray(orders)
  return persist.jit(lambda lq, l1, s: _orders_impl(lq, l1, s, orders, nodes))


def _orders_impl(lq, l1, s, orders, nodes):
  n = lq.shape[0]
  dtype = lq.dtype
  is_int = _exact_orders(orders)
  out = [None] * len(orders)
  for sel in _integer_buckets(orders):
    bucket = orders[sel].astype(np.int64)
    per = max(1, _CHUNK_TERMS_BINOMIAL // (int(bucket.max()) * sel.size))
    fn = lambda x, bucket=bucket: log_a_minus_1_binomial(*x, bucket)
    res = _map_rows(fn, (lq, l1, s), n, per)
    for j, i in enumerate(sel):
      out[i] = res[:, j]
  frac = np.nonzero(~is_int)[0]
  if frac.size:
    a = jnp.asarray(np.where(np.isfinite(orders[frac]), orders[frac], 2.0), dtype)
    per = max(1, _CHUNK_TERMS // (2 * nodes * frac.size))
    fn = lambda x: log_a_minus_1_quadrature(x[0][:, None], x[1][:, None], x[2][:, None], a[None, :],
                                             nodes=nodes)
    res = _map_rows(fn, (lq, l1, s), n, per)
    for j, i in enumerate(frac):
      out[i] = res[:, j]
  return jnp.stack(out, axis=-1) if out else jnp.zeros((n, 0), dtype)


def gaussian(sigma, alpha):
  """RDP of the Gaussian mechanism: ε(α) = α/(2σ²) (Mironov 2017, Prop. 7).

  Args:
    sigma: noise multiplier(s) > 0.
    alpha: order(s) > 1.

  Returns:
    α/(2σ²), broadcast.
  """
  sigma = jnp.asarray(sigma)
  alpha = jnp.asarray(alpha)
  dtype = result_float_dtype(sigma, alpha)
  return gaussian_rdp(sigma.astype(dtype), alpha.astype(dtype), dtype)


def sampled_gaussian_bound(q, sigma, alpha):
  """Closed-form upper bound ε(α) = 2q²α/σ² (Mironov–Talwar–Zhang, Thm 11).

  Valid when q ≤ 1/5, σ ≥ 4, α > 1 and, with L = ln(1 + 1/(q(α-1))), ::

      α ≤ σ²L/2 - 2 ln σ   and
      α ≤ (σ²L²/2 - ln 5 - 2 ln σ) / (L + ln(qα) + 1/(2σ²)).

  Returns +inf wherever these conditions fail (and 0 at q = 0).

  Args:
    q: sampling rate(s).
    sigma: noise multiplier(s).
    alpha: order(s).

  Returns:
    The bound, broadcast; ≥ ``sampled_gaussian`` wherever finite.
  """
  q, sigma, alpha = jnp.broadcast_arrays(*map(jnp.asarray, (q, sigma, alpha)))
  dtype = result_float_dtype(q, sigma, alpha)
  q, sigma, alpha = (x.astype(dtype) for x in (q, sigma, alpha))
  qs = jnp.clip(q, 1e-300 if dtype == jnp.float64 else 1e-37, 1.0)
  am1 = jnp.maximum(alpha - 1.0, jnp.finfo(dtype).tiny)
  big_l = nx.log1p(1.0 / (qs * am1))
  log_s = jnp.log(sigma)
  cond1 = alpha <= 0.5 * sigma**2 * big_l - 2.0 * log_s
  denom = big_l + jnp.log(qs * alpha) + 1.0 / (2.0 * sigma**2)
  cond2 = alpha * denom <= 0.5 * sigma**2 * big_l**2 - math.log(5.0) - 2.0 * log_s
  ok = (q <= 0.2) & (sigma >= 4.0) & (alpha > 1.0) & cond1 & cond2
  val = 2.0 * q * q * alpha / (sigma * sigma)
  out = jnp.where(ok, val, jnp.inf)
  return jnp.where(q == 0.0, 0.0, out)


# --------------------------------------------------------------------------
# DP-SGD: T compositions of the sampled Gaussian
# --------------------------------------------------------------------------


def dpsgd_rdp(q, sigma, steps, orders=None, *, _nodes=None):
  """RDP curve of ``steps`` compositions of the sampled Gaussian.

  ε_T(α) = T·ε(α) (RDP composes additively, Mironov 2017 Prop. 1).

  Args:
    q, sigma, steps: broadcast together (shape S).
    orders: 1-D orders (default ``DEFAULT_ORDERS``).

  Returns:
    Array of shape S + (len(orders),).
  """
  orders = DEFAULT_ORDERS if orders is None else orders
  q = jnp.asarray(q)
  sigma = jnp.asarray(sigma)
  steps = jnp.asarray(steps)
  dtype = result_float_dtype(q, sigma)
  per_step = sampled_gaussian(q[..., None], sigma[..., None], orders, _nodes=_nodes)
  return steps.astype(dtype)[..., None] * per_step


def dpsgd_epsilon(q, sigma, steps, delta, orders=None, method="improved", *, _nodes=None):
  """ε of DP-SGD (``steps`` sampled-Gaussian steps) at ``delta`` via RDP.

  Pure and jittable (``orders`` must be concrete); broadcasts q, sigma, steps,
  delta. See :func:`to_epsilon` for the conversion.
  """
  orders = DEFAULT_ORDERS if orders is None else orders
  curve = dpsgd_rdp(q, sigma, steps, orders, _nodes=_nodes)
  return to_epsilon(curve, orders, delta, method)[0]


def dpsgd_delta(q, sigma, steps, epsilon, orders=None, *, _nodes=None):
  """δ of DP-SGD at ``epsilon`` via RDP (pure, jittable, broadcasting)."""
  orders = DEFAULT_ORDERS if orders is None else orders
  curve = dpsgd_rdp(q, sigma, steps, orders, _nodes=_nodes)
  return to_delta(curve, orders, epsilon)

"""Batched inverse accounting for DP-SGD: noise σ, steps T and sampling rate q.

Every function here answers thousands of "inverse" questions in one call:
``sigma`` finds, for each configuration, the smallest noise multiplier σ whose
ε(q, σ, T, δ) meets a target; ``steps`` the largest number of steps T;
``sampling_rate`` the largest sampling rate q. They broadcast their arguments
like NumPy and return float64 NumPy arrays.

Soundness. ε is non-increasing in σ and non-decreasing in q and T, so each
question has a feasibility boundary. The solvers keep a bracket whose
feasible end was *evaluated* feasible, and the host-level wrappers finish with
a check by :func:`jaxdp.epsilon` itself (the same code path users call to
account), stepping σ up (q, T down) until it passes: a returned value never
overspends the budget. Tightness: σ(1 - rtol) (q(1 + rtol), T + 1) does not
meet the target.

Method (RDP). A vectorised, safeguarded secant method in x = log σ
(x = -log q) on g(x) = log ε(x) - log ε_target, which is close to linear
(ε ∝ 1/σ for large σ): geometric bracketing from a closed-form first guess,
then regula falsi whose iterate is offset by ±rtol/4 toward the side that has
not moved (so both ends of the bracket converge), with a bisection step
whenever one end moves twice in a row. It runs inside ``jit`` under a fixed
iteration budget (``lax.while_loop`` that stops early once every
configuration has converged).

Cost. The integer orders α ≤ 64 of the order list are cheap (exact binomial
sums of ≤ 64 terms); fractional orders (quadrature) and large integer orders
are ~100× more expensive. The solver therefore runs in two phases: (1) solve
with the cheap orders only, which gives a feasible σ₁ (a smaller order set can
only give a larger ε); (2) the full ε at σ₁ is computed once (this is also the
feasibility check); where an expensive order beats the cheap ones there,
σ₁ is refined with a 3-order window around the best order (traced orders),
for a few rounds, each followed by a full check. ε(σ) = min_α ε_α(σ) and each
ε_α is non-increasing, so σ* = min_α σ_α and the window solves combine with
a ``min``.

Differentiability. :func:`differentiable_epsilon` has a custom JVP by the
envelope theorem (dε/dθ = ∂ε_α/∂θ at the minimising order α*, Danskin), and
:func:`solve_sigma` a custom JVP by the implicit function theorem
(dσ* = (dε_target - ε_q dq - ε_T dT - ε_δ dδ) / ε_σ). :func:`optimize_dpsgd`
uses them with ``optax.adam``.

References: Mironov, Talwar & Zhang (2019) for the sampled-Gaussian RDP;
Balle et al. (2020, arXiv:2004.00010, Prop. 12) for the conversion; Balle &
Wang (ICML 2018, Thm 8) for :data:`analytic_gaussian`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _continuous_order
from jaxdp import _grid_search
from jaxdp import _numerics as nx
from jaxdp import rdp
from jaxdp.profiles import analytic_gaussian_sigma as analytic_gaussian

__all__ = [
    "sigma",
    "steps",
    "sampling_rate",
    "analytic_gaussian",
    "differentiable_epsilon",
    "solve_sigma",
    "optimize_dpsgd",
    "DPSGDPlan",
    "SIGMA_RANGE",
    "MIN_SAMPLING_RATE",
]

#: σ is searched in this range: σ = SIGMA_RANGE[0] is returned when it already
#: meets the target, inf when even SIGMA_RANGE[1] does not.
SIGMA_RANGE = (1e-3, 1e7)
#: Smallest sampling rate searched; below it ``sampling_rate`` returns 0.
MIN_SAMPLING_RATE = 1e-12

_MAX_ITER = 100        # iteration budget of the jitted solver
_CHUNK = 256           # configurations per jitted call (fixed: one compile)
_SMALL = 16            # chunk for small calls (single configurations, CLI)
_CHEAP_MAX_ORDER = 64  # integer orders up to this form the cheap phase-1 set
_ROUNDS = 4            # refinement rounds with expensive-order windows
_WINDOW = 3            # orders per refinement window
_BUMPS = 40            # feasibility step-ups before giving up (never reached)
_MAX_STEPS = 2.0**53   # steps beyond this are reported as inf

_D = rdp.DEFAULT_ORDERS
_DEFAULT_CHEAP = tuple(float(o) for o in _D[(_D == np.floor(_D)) & (_D <= _CHEAP_MAX_ORDER)])

# Optional sharding for the chunked kernels (set by jaxdp.sweep).
_SHARDING = contextvars.ContextVar("jaxdp_calibrate_sharding", default=None)


@contextlib.contextmanager
def _use_sharding(sharding):
  token = _SHARDING.set(sharding)
  try:
    yield
  finally:
    _SHARDING.reset(token)


# --------------------------------------------------------------------------
# The bracketing solver (pure; used inside jit and eagerly on the host)
# --------------------------------------------------------------------------


class _Bracket(NamedTuple):
  lo: jax.Array       # largest x evaluated infeasible (or xmin)
  glo: jax.Array      # g(lo)
  has_lo: jax.Array
  hi: jax.Array       # smallest x evaluated feasible (or xmax)
  ghi: jax.Array
  eps_hi: jax.Array   # ε(hi)
  has_hi: jax.Array
  last: jax.Array     # 1: lo moved last, 2: hi moved last
  run: jax.Array      # consecutive moves of the same end
  k: jax.Array        # iterations done


def _tiny(dtype):
  return 1e-300 if dtype == jnp.float64 else 1e-37


def _g(eps, target):
  t = _tiny(eps.dtype)
  return jnp.log(jnp.maximum(eps, t)) - jnp.log(jnp.maximum(target, t))


def _init(x0, e0, target, xmin, xmax):
  feas = e0 <= target
  g0 = _g(e0, target)
  inf = jnp.full_like(x0, jnp.inf)
  return _Bracket(
      lo=jnp.where(feas, xmin, x0), glo=jnp.where(feas, inf, g0), has_lo=~feas,
      hi=jnp.where(feas, x0, xmax), ghi=jnp.where(feas, g0, -inf),
      eps_hi=jnp.where(feas, e0, inf), has_hi=feas,
      last=jnp.where(feas, 2, 1).astype(jnp.int32), run=jnp.ones(x0.shape, jnp.int32),
      k=jnp.zeros((), jnp.int32))


def _done(s: _Bracket, xmin, xmax, tol):
  both = s.has_lo & s.has_hi
  return ((both & (s.hi - s.lo <= tol)) | (s.has_hi & (s.hi <= xmin))
          | (s.has_lo & (s.lo >= xmax)))


def _propose(s: _Bracket, xmin, xmax, tol):
  """Next point: offset regula falsi / bisection / geometric expansion."""
  w = s.hi - s.lo
  mid = s.lo + 0.5 * w
  denom = s.glo - s.ghi
  ok = jnp.isfinite(denom) & (denom > 0) & jnp.isfinite(s.glo)
  frac = jnp.where(ok, s.glo / jnp.where(ok, denom, 1.0), 0.5)
  offset = jnp.where(s.last == 1, 0.25 * tol, -0.25 * tol)
  p_both = s.lo + frac * w + offset
  p_both = jnp.where(s.run >= 2, mid, p_both)
  margin = jnp.minimum(0.05 * w, 0.25 * tol)
  p_both = jnp.clip(p_both, s.lo + margin, s.hi - margin)
  grow = jnp.exp2(jnp.minimum(s.run - 1, 8).astype(s.lo.dtype))
  step_dn = jnp.clip(-1.5 * s.ghi, 2.0 * tol, 4.0) * grow
  step_up = jnp.clip(1.5 * s.glo, 2.0 * tol, 4.0) * grow
  p_dn = jnp.maximum(s.hi - jnp.where(jnp.isnan(step_dn), 1.0, step_dn), xmin)
  p_up = jnp.minimum(s.lo + jnp.where(jnp.isnan(step_up), 1.0, step_up), xmax)
  both = s.has_lo & s.has_hi
  p = jnp.where(both, p_both, jnp.where(s.has_hi, p_dn, p_up))
  fallback = jnp.where(both, mid, jnp.where(s.has_hi, xmin, xmax))
  return jnp.where(jnp.isfinite(p), p, fallback)


def _update(s: _Bracket, p, e, target, active):
  feas = e <= target
  g = _g(e, target)
  up_hi = active & feas
  up_lo = active & ~feas
  side = jnp.where(feas, 2, 1).astype(jnp.int32)
  run = jnp.where(active, jnp.where(side == s.last, s.run + 1, 1), s.run)
  return _Bracket(
      lo=jnp.where(up_lo, p, s.lo), glo=jnp.where(up_lo, g, s.glo), has_lo=s.has_lo | up_lo,
      hi=jnp.where(up_hi, p, s.hi), ghi=jnp.where(up_hi, g, s.ghi),
      eps_hi=jnp.where(up_hi, e, s.eps_hi), has_hi=s.has_hi | up_hi,
      last=jnp.where(active, side, s.last), run=run.astype(jnp.int32), k=s.k + 1)


def _solve(eps_of_x, target, x0, xmin, xmax, tol, max_iter=_MAX_ITER):
  """Boundary of {x : eps_of_x(x) ≤ target} in [xmin, xmax] (ε non-increasing in x).

  Pure and jittable. Returns the final :class:`_Bracket`: ``hi`` is the
  smallest x evaluated feasible (valid where ``has_hi``), ``lo`` the largest
  evaluated infeasible; on convergence ``hi - lo ≤ tol``, or ``hi == xmin``
  (feasible everywhere), or ``lo == xmax`` (unreachable).
  """
  x0 = jnp.clip(x0, xmin, xmax)
  s = _init(x0, eps_of_x(x0), target, xmin, xmax)

  def cond(s):
    return (s.k < max_iter) & jnp.any(~_done(s, xmin, xmax, tol))

  def body(s):
    active = ~_done(s, xmin, xmax, tol)
    p = _propose(s, xmin, xmax, tol)
    p = jnp.where(active, p, s.hi)
    return _update(s, p, eps_of_x(p), target, active)

  return jax.lax.while_loop(cond, body, s)


# --------------------------------------------------------------------------
# Parametrisations: x ↦ (q, σ)
# --------------------------------------------------------------------------


def _bounds(kind, dtype=jnp.float64):
  if kind == "sigma":
    return math.log(SIGMA_RANGE[0]), math.log(SIGMA_RANGE[1])
  return 0.0, -math.log(MIN_SAMPLING_RATE)


def _qs(kind, x, a):
  """(q, σ) from the unknown x and the known parameter a."""
  if kind == "sigma":
    return a, jnp.exp(x)
  return jnp.exp(-x), a


def _first_guess(kind, target, delta, a, steps):
  """Closed-form start: ε ≈ q √(2 T log(1/δ)) / σ (Gaussian-regime RDP)."""
  c = np.sqrt(2.0 * np.maximum(steps, 1.0) * np.log(1.0 / delta))
  t = np.maximum(target, 1e-12)
  with np.errstate(divide="ignore", over="ignore"):
    if kind == "sigma":
      return np.log(np.maximum(a * c / t, 1e-300))
    return -np.log(np.minimum(t * a / c, 1.0))


# --------------------------------------------------------------------------
# Chunked execution of jitted kernels
# --------------------------------------------------------------------------


def _chunk_size(n):
  """Chunk length: 16 for small calls, else 256 — only two shapes ever compile."""
  return _SMALL if n <= _SMALL else _CHUNK


_PAD = {"x": 0.0, "a": 0.5, "b": 1.0, "t": 1.0, "d": 1e-5, "q": 0.5, "s": 1.0, "w": 2.0}


def _map_chunks(fn, arrays, pads):
  """Applies jitted ``fn`` to equal-length host arrays in padded chunks.

  Chunks have one of two fixed lengths (:func:`_chunk_size`) so that each
  kernel compiles at most twice. Under :func:`_use_sharding` each chunk is
  placed with the given sharding and is ``_CHUNK`` per device long.
  """
  n = arrays[0].shape[0]
  if n == 0:
    return None
  sharding = _SHARDING.get()
  size = _chunk_size(n)
  if sharding is not None:
    size = _CHUNK * sharding.mesh.devices.size
  outs = []
  for start in range(0, n, size):
    parts = [a[start:start + size] for a in arrays]
    m = parts[0].shape[0]
    if m < size:
      parts = [np.concatenate([p, np.full((size - m,) + p.shape[1:], v, p.dtype)])
               for p, v in zip(parts, pads)]
    if sharding is not None:
      parts = [jax.device_put(p, sharding if p.ndim == 1 else jax.sharding.NamedSharding(
          sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec, None))) for p in parts]
    else:
      parts = [jnp.asarray(p) for p in parts]
    res = fn(*parts)
    res = res if isinstance(res, tuple) else (res,)
    outs.append(tuple(np.asarray(r)[:m] for r in res))
  return tuple(np.concatenate([o[i] for o in outs]) for i in range(len(outs[0])))


@functools.lru_cache(maxsize=64)
def _solver_fn(kind, orders_key, max_iter=_MAX_ITER):
  orders = np.asarray(orders_key)
  xmin, xmax = _bounds(kind)

  def run(x0, a, b, t, d, tol):
    def eps_of_x(x):
      q, s = _qs(kind, x, a)
      return rdp.dpsgd_epsilon(q, s, b, d, orders)

    s = _solve(eps_of_x, t, x0, xmin, xmax, tol, max_iter)
    q, sg = _qs(kind, s.hi, a)
    _, best = rdp.to_epsilon(rdp.dpsgd_rdp(q, sg, b, orders), orders, d)
    return s.hi, s.has_hi, s.eps_hi, best, s.has_lo

  return jax.jit(run)


def _window_epsilon(q, s, b, d, win):
  per = rdp.sampled_gaussian(q[..., None], s[..., None], win)
  return rdp.to_epsilon(b[..., None] * per, win, d)[0]


@functools.lru_cache(maxsize=8)
def _window_solver_fn(kind):
  xmin, xmax = _bounds(kind)

  def run(x0, a, b, t, d, tol, win):
    def eps_of_x(x):
      q, s = _qs(kind, x, a)
      return _window_epsilon(q, s, b, d, win)

    # Only a boundary below x0 (the current answer) can improve it: search
    # [xmin, x0], so configurations already infeasible at x0 stop at once.
    s = _solve(eps_of_x, t, x0, xmin, x0, tol)
    return s.hi, s.has_hi, s.eps_hi

  return jax.jit(run)


@functools.lru_cache(maxsize=8)
def _continuous_solver_fn(kind):
  """Boundary of the ε minimised over every real order in [lo, hi]
  (golden section, :mod:`jaxdp._continuous_order`), searched below x0."""
  xmin, _ = _bounds(kind)

  def run(x0, a, b, t, d, tol, lo, hi):
    def eps_of_x(x):
      q, s = _qs(kind, x, a)
      return _continuous_order.golden_minimum(q, s, b, d, lo, hi, kind="epsilon",
                                              method="improved", nodes=rdp._NODES_PER_WINDOW)

    s = _solve(eps_of_x, t, x0, xmin, x0, tol)
    return s.hi, s.has_hi, s.eps_hi

  return jax.jit(run)


@functools.lru_cache(maxsize=32)
def _curve_fn(orders_key, with_order):
  orders = np.asarray(orders_key)

  def run(q, s, b, d):
    eps, best = rdp.to_epsilon(rdp.dpsgd_rdp(q, s, b, orders), orders, d)
    return (eps, best) if with_order else eps

  return jax.jit(run)


@functools.lru_cache(maxsize=32)
def _per_step_fn(orders_key):
  orders = np.asarray(orders_key)
  return jax.jit(lambda q, s: rdp.dpsgd_rdp(q, s, jnp.ones_like(q), orders))


def _orders_key(orders):
  return tuple(float(o) for o in np.asarray(orders, np.float64).ravel())


def _check_epsilon_rdp(q, s, t_steps, d, orders):
  """ε by :func:`jaxdp.epsilon` (the public path), sizes padded to powers of two."""
  from jaxdp import _api
  n = q.shape[0]
  size = _chunk_size(n)
  out = []
  for start in range(0, n, size):
    parts = [a[start:start + size] for a in (q, s, t_steps, d)]
    m = parts[0].shape[0]
    parts = [np.concatenate([p, np.full(size - m, v)]) for p, v in zip(parts, (0.5, 1.0, 1.0, 1e-5))]
    e = _api.epsilon(*parts, orders=None if orders is None else np.asarray(orders))
    out.append(np.asarray(e, np.float64)[:m])
  return np.concatenate(out) if out else np.zeros(0)


def _check_epsilon(kind_acc, q, s, t_steps, d, orders):
  if kind_acc == "pld":
    from jaxdp import _api
    if q.shape[0] == 0:
      return np.zeros(0)
    return np.asarray(_api.epsilon(q, s, t_steps, d, accountant="pld"), np.float64).reshape(-1)
  return _check_epsilon_rdp(q, s, t_steps, d, orders)


# --------------------------------------------------------------------------
# Host-level drivers
# --------------------------------------------------------------------------


def _validate_common(target_epsilon, delta, rtol, accountant):
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_array("rtol", rtol, low=0.0, high=0.1, low_open=True)
  if accountant not in ("rdp", "pld"):
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")


def _resolve_orders(orders):
  from jaxdp import _api
  checked = _api._validate_orders(orders)
  full = rdp.DEFAULT_ORDERS if checked is None else checked
  return checked, np.sort(np.unique(np.asarray(full, np.float64)))


def _flat(shape, *arrays):
  return [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1).copy() for a in arrays]


def _from_x(kind, x):
  xmin, _ = _bounds(kind)
  if kind == "sigma":
    return np.where(x <= xmin, SIGMA_RANGE[0], np.exp(x))
  return np.where(x <= xmin, 1.0, np.exp(-x))


def _small_boundary(kind, target, delta, a, b, orders_checked, rtol):
  """A few targets (one question from the command line): rounds of 16 probes
  per target through :func:`jaxdp.epsilon` itself (:mod:`jaxdp._grid_search`),
  which reuses its compiled programs instead of compiling the solver's. The
  answer's ε was evaluated by that function and is <= the target; the probe
  a factor e^{-rtol/2} below it (q: above it) was not. Returns (value, unreachable)."""
  xmin, xmax = _bounds(kind)

  def eps_at(idx, x):
    m, p = x.shape
    v = _from_x(kind, x.reshape(-1))
    known = np.repeat(a[idx], p)
    q, s = (known, v) if kind == "sigma" else (v, known)
    return _check_epsilon_rdp(q, s, np.repeat(b[idx], p), np.repeat(delta[idx], p),
                              orders_checked).reshape(m, p)

  x, _, feasible = _grid_search.boundary(eps_at, target, xmin, xmax, 0.5 * rtol)
  return _from_x(kind, x), ~feasible

def _rdp_boundary(kind, target, delta, a, b, orders_checked, orders, rtol):
  """Solve for σ (kind "sigma", a = q) or q (kind "q", a = σ) under RDP.

  Returns (value, unreachable) on flat arrays.
  """
  n = target.shape[0]
  if n <= _SMALL:
    return _small_boundary(kind, target, delta, a, b, orders_checked, rtol)
  tol = 0.5 * rtol
  xmin, xmax = _bounds(kind)
  cheap = orders[(orders == np.floor(orders)) & (orders <= _CHEAP_MAX_ORDER)]
  single = cheap.size in (0, orders.size)
  phase1 = orders if single else cheap
  x0 = _first_guess(kind, target, delta, a, b)
  x0 = np.clip(np.where(np.isfinite(x0), x0, xmax), xmin, xmax)
  tolv = np.full(n, tol)
  hi, has_hi, eps_hi, best_c, _ = _map_chunks(
      _solver_fn(kind, _orders_key(phase1)), [x0, a, b, target, delta, tolv],
      [_PAD[k] for k in "xabtdt"])
  x = np.where(has_hi, hi, xmax)
  eps_ref = np.where(has_hi, eps_hi, np.inf)   # ε of the order set that found x

  def qs(xv, idx):
    v = _from_x(kind, xv)
    return (a[idx], v) if kind == "sigma" else (v, a[idx])

  def window_solve(idx, win):
    """Boundary over the orders ``win`` (per configuration); keeps the min."""
    xw, okw, epsw = _map_chunks(
        _window_solver_fn(kind), [x[idx], a[idx], b[idx], target[idx], delta[idx],
                                  tolv[idx], win],
        [0.0, 0.5, 1.0, 1.0, 1e-5, tol, 2.0])
    better = okw & (xw < x[idx])
    x[idx] = np.where(better, xw, x[idx])
    eps_ref[idx] = np.where(better, epsw, eps_ref[idx])
    return better

  if not single:
    # The best full-set order is nearly always a neighbour (in the sorted
    # full list) of the best cheap order: solve on the expensive neighbours
    # before the (single) full check.
    pos = np.clip(np.searchsorted(orders, best_c), 0, orders.size - 1)
    left = orders[np.maximum(pos - 1, 0)]
    right = orders[np.minimum(pos + 1, orders.size - 1)]
    exp_l = ~np.isin(left, cheap) & (pos > 0)
    exp_r = ~np.isin(right, cheap) & (pos < orders.size - 1)
    cand = has_hi & (exp_l | exp_r)
    idx = np.nonzero(cand)[0]
    if idx.size:
      win = np.stack([np.where(exp_l, left, right)[idx], np.where(exp_r, right, left)[idx]], 1)
      window_solve(idx, win)
  q_, s_ = qs(x, np.arange(n))
  e_full = _check_epsilon_rdp(q_, s_, b, delta, orders_checked)
  unreachable = ~has_hi & (e_full > target)
  if not single:
    # Where the cheap boundary sits on a jump of ε (the KL branch of the
    # conversion switching on), the full boundary may lie anywhere below it:
    # solve those with the full order set directly.
    gap = max(1e-3, 50.0 * rtol)
    jump = ~unreachable & (eps_ref < target * (1.0 - gap))
    # Elsewhere, refine where an order outside those solved beats them at x.
    refine = ~unreachable & ~jump & (e_full < eps_ref * (1.0 - 1e-10))
    for _ in range(_ROUNDS):
      idx = np.nonzero(refine)[0]
      if idx.size == 0:
        break
      qi, si = qs(x[idx], idx)
      _, best = _map_chunks(_curve_fn(_orders_key(orders), True),
                            [qi, si, b[idx], delta[idx]], [0.5, 1.0, 1.0, 1e-5])
      pos = np.clip(np.searchsorted(orders, best), 0, orders.size - 1)
      k = min(_WINDOW, orders.size)
      start = np.clip(pos - (k // 2), 0, orders.size - k)
      better = window_solve(idx, orders[start[:, None] + np.arange(k)[None, :]])
      qi, si = qs(x[idx], idx)
      e_full[idx] = _check_epsilon_rdp(qi, si, b[idx], delta[idx], orders_checked)
      refine = np.zeros(n, bool)
      refine[idx] = better & (e_full[idx] < eps_ref[idx] * (1.0 - 1e-10))
      jump[idx] |= better & (eps_ref[idx] < target[idx] * (1.0 - gap))
    jump |= refine  # not settled by the windows: full solve
    idx = np.nonzero(jump)[0]
    if idx.size:
      xf, okf, _, _, _ = _map_chunks(
          _solver_fn(kind, _orders_key(orders)),
          [x[idx], a[idx], b[idx], target[idx], delta[idx], tolv[idx]],
          [_PAD[k] for k in "xabtdt"])
      x[idx] = np.where(okf & (xf < x[idx]), xf, x[idx])
      qi, si = qs(x[idx], idx)
      e_full[idx] = _check_epsilon_rdp(qi, si, b[idx], delta[idx], orders_checked)
  if orders_checked is None:
    # Default orders: ε is the minimum over every real α > 1 (jaxdp.epsilon
    # with orders=None), so solve once more on the golden-section minimum in
    # the bracket around the best grid order at the current boundary.
    idx = np.nonzero(~unreachable)[0]
    if idx.size:
      qi, si = qs(x[idx], idx)
      _, best = _map_chunks(_curve_fn(_orders_key(orders), True),
                            [qi, si, b[idx], delta[idx]], [0.5, 1.0, 1.0, 1e-5])
      pos = np.clip(np.searchsorted(orders, best), 0, orders.size - 1)
      lo, hi = _continuous_order.bracket(orders, pos)
      xc, okc, _ = _map_chunks(
          _continuous_solver_fn(kind),
          [x[idx], a[idx], b[idx], target[idx], delta[idx], tolv[idx], lo, hi],
          [0.0, 0.5, 1.0, 1.0, 1e-5, tol, 1.5, 3.0])
      better = okc & (xc < x[idx])
      if np.any(better):
        sel = idx[better]
        x[sel] = xc[better]
        qi, si = qs(x[sel], sel)
        e_full[sel] = _check_epsilon_rdp(qi, si, b[sel], delta[sel], orders_checked)
  value = _from_x(kind, x)
  value = _make_feasible(kind, "rdp", value, e_full, target, delta, a, b, orders_checked,
                         skip=unreachable)
  return value, unreachable


def _make_feasible(kind, acc, value, e_full, target, delta, a, b, orders_checked, skip):
  """Steps σ up (q down) until the public ε meets the target; never overspends."""
  value = value.copy()
  bad = (e_full > target) & ~skip
  for j in range(_BUMPS):
    idx = np.nonzero(bad)[0]
    if idx.size == 0:
      return value
    factor = 2.0**-44 * 4.0**j
    if kind == "sigma":
      value[idx] = value[idx] * (1.0 + factor)
      e = _check_epsilon(acc, a[idx], value[idx], b[idx], delta[idx], orders_checked)
    else:
      value[idx] = value[idx] * max(0.0, 1.0 - factor)
      e = _check_epsilon(acc, value[idx], a[idx], b[idx], delta[idx], orders_checked)
    bad[idx] = e > target[idx]
  # Unreachable in practice; never return something that overspends.
  value[bad] = np.inf if kind == "sigma" else 0.0
  return value


def _pld_boundary(kind, target, delta, a, b, rtol):
  """Host-level bracketing solve on batched PLD ε (same algorithm as the kernel)."""
  n = target.shape[0]
  tol = 0.5 * max(rtol, 1e-9)
  xmin, xmax = _bounds(kind)
  # Start from the cheap-order RDP answer (RDP over-estimates ε, so it is
  # nearly always feasible for PLD).
  cheap = _DEFAULT_CHEAP
  x0 = _first_guess(kind, target, delta, a, b)
  x0 = np.clip(np.where(np.isfinite(x0), x0, xmax), xmin, xmax)
  hi, has_hi, _, _, _ = _map_chunks(_solver_fn(kind, cheap, 40),
                                    [x0, a, b, target, delta, np.full(n, 1e-3)],
                                    [_PAD[k] for k in "xabtdt"])
  x0 = np.where(has_hi, hi, x0)

  def eps_of_x(x, idx):
    v = _from_x(kind, x)
    q, s = (a[idx], v) if kind == "sigma" else (v, a[idx])
    return _check_epsilon("pld", q, s, b[idx], delta[idx], None)

  with nx.x64():
    st = _init(jnp.asarray(x0), jnp.asarray(eps_of_x(x0, np.arange(n))), jnp.asarray(target),
               xmin, xmax)
    for _ in range(60):
      done = np.asarray(_done(st, xmin, xmax, tol))
      if done.all():
        break
      p = np.asarray(_propose(st, xmin, xmax, tol))
      idx = np.nonzero(~done)[0]
      e = np.zeros(n)
      e[idx] = eps_of_x(p[idx], idx)
      st = _update(st, jnp.asarray(p), jnp.asarray(e), jnp.asarray(target), jnp.asarray(~done))
    hi = np.asarray(st.hi)
    has_hi = np.asarray(st.has_hi)
  unreachable = ~has_hi
  return np.where(has_hi, _from_x(kind, hi), np.nan), unreachable


def _boundary(kind, accountant, target, delta, a, b, orders_checked, orders, rtol):
  """σ or q at the ε boundary by the chosen accountant, in float64 (scoped)."""
  with nx.x64():
    if accountant == "rdp":
      return _rdp_boundary(kind, target, delta, a, b, orders_checked, orders, rtol)
    return _pld_boundary(kind, target, delta, a, b, rtol)


def _warn_unreachable(what, unreachable, target, delta, a, b, names):
  count = int(unreachable.sum())
  if count:
    i = int(np.nonzero(unreachable)[0][0])
    warnings.warn(
        f"{count} of {unreachable.size} target(s) cannot be met ({what}); e.g. target_epsilon="
        f"{target[i]:g}, delta={delta[i]:g}, {names[0]}={a[i]:g}, {names[1]}={b[i]:g}.",
        RuntimeWarning, stacklevel=3)


def sigma(target_epsilon=None, delta=None, q=None, steps=None, *, accountant: str = "rdp",
          rtol: float = 1e-6, orders=None, target_tpr=None, at_fpr=None):
  """Smallest noise multiplier σ with ε(q, σ, steps, δ) ≤ target_epsilon, batched.

  Or, with ``target_tpr`` and ``at_fpr`` instead of ``target_epsilon`` and
  ``delta``: the smallest σ whose certified bound on the TPR of any
  membership-inference test at FPR ``at_fpr`` is ≤ ``target_tpr``
  (attack-aware calibration, Kulynych et al. 2024;
  :func:`jaxdp.tradeoff.calibrate_sigma`, PLD-based, default rtol 1e-3).

  Solves ε(q, σ, T, δ) = ε_target for σ for whole arrays of configurations
  at once (all arguments broadcast). See the module docstring for the
  method. Guarantees, for every finite answer σ:

  * ``jaxdp.epsilon(q, σ, steps, delta, accountant=..., orders=...) ≤ target``
    (checked by that very function; σ is stepped up until it holds);
  * σ·(1 - rtol) does not meet the target (tight), unless σ is the lower end
    of :data:`SIGMA_RANGE` (the target is met by any σ in the range).

  Special cases: q = 0 or steps = 0 spend nothing → σ = 0. A target that even
  σ = SIGMA_RANGE[1] cannot meet (e.g. ε below what the RDP conversion can
  certify for this δ) → ``inf`` and a :class:`RuntimeWarning`; never NaN.

  Args:
    target_epsilon: ε budget(s) ≥ 0.
    delta: δ in (0, 1).
    q: sampling rate(s) in [0, 1], or a :mod:`jaxdp.sampling` sampler (then
      scalar arguments; σ by bisection on that sampler's ε).
    steps: number(s) of steps (whole numbers ≥ 0).
    accountant: "rdp" (default) or "pld" (tight; host-level bisection over
      batched :func:`jaxdp.pld.epsilon` calls; much slower).
    rtol: relative tolerance on σ, in (0, 0.1].
    orders: RDP orders (default None: every real order α > 1).
    target_tpr: TPR bound(s) in (at_fpr, 1) for attack-aware calibration.
    at_fpr: the FPR(s) in (0, 1) at which ``target_tpr`` applies.

  Returns:
    σ as float64 NumPy (0-d → ``numpy.float64``), the broadcast shape.

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  from jaxdp import _sampler_api  # pylint: disable=g-import-not-at-top
  if target_tpr is not None or at_fpr is not None:
    if target_epsilon is not None or delta is not None:
      raise ValueError("give either target_epsilon and delta, or target_tpr and at_fpr; "
                       f"found target_epsilon={target_epsilon!r}, delta={delta!r}, "
                       f"target_tpr={target_tpr!r}, at_fpr={at_fpr!r}.")
    if target_tpr is None or at_fpr is None:
      raise ValueError(f"target_tpr and at_fpr go together; found target_tpr={target_tpr!r}, "
                       f"at_fpr={at_fpr!r}.")
    if q is None or steps is None or _sampler_api.is_sampler(q):
      raise ValueError(f"attack-aware calibration needs a sampling rate q and steps; found "
                       f"q={q!r}, steps={steps!r}.")
    from jaxdp import tradeoff  # pylint: disable=g-import-not-at-top
    return tradeoff.calibrate_sigma(q, steps, target_tpr=target_tpr, at_fpr=at_fpr,
                                    rtol=max(rtol, 1e-3))
  for name, value in (("target_epsilon", target_epsilon), ("delta", delta), ("q", q),
                      ("steps", steps)):
    if value is None:
      raise ValueError(f"{name} is required (found None).")
  if _sampler_api.is_sampler(q):  # batches from a jaxdp.sampling sampler
    _validate_common(target_epsilon, delta, rtol, accountant)
    return _sampler_api.calibrate_sigma(q, target_epsilon, delta, steps, accountant, rtol)
  _validate_common(target_epsilon, delta, rtol, accountant)
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("steps", steps, low=0.0, integer=True)
  shape = nx.check_same_shape(target_epsilon=target_epsilon, delta=delta, q=q, steps=steps)
  orders_checked, orders_full = _resolve_orders(orders)
  t, d, qq, tt = _flat(shape, target_epsilon, delta, q, steps)
  out = np.zeros(t.shape)
  live = (qq > 0) & (tt > 0)
  idx = np.nonzero(live)[0]
  if idx.size:
    val, unr = _boundary("sigma", accountant, t[idx], d[idx], qq[idx], tt[idx], orders_checked,
                         orders_full, rtol)
    val = np.where(unr, np.inf, val)
    out[idx] = val
    _warn_unreachable(f"ε at σ = {SIGMA_RANGE[1]:g} still exceeds it; returning inf", unr,
                      t[idx], d[idx], qq[idx], tt[idx], ("q", "steps"))
  return nx.to_host(out.reshape(shape))


def sampling_rate(target_epsilon, delta, sigma, steps, *, accountant: str = "rdp",
                  rtol: float = 1e-6, orders=None, sampler=None):
  """Largest sampling rate q ≤ 1 with ε(q, σ, steps, δ) ≤ target_epsilon, batched.

  The inverse of :func:`jaxdp.epsilon` in q (e.g. for the largest expected
  batch size q·N). Guarantees ``jaxdp.epsilon(q, ...) ≤ target`` (checked by
  that function) and that q·(1 + rtol) does not meet the target (unless q = 1).
  steps = 0 → 1. Where even q = :data:`MIN_SAMPLING_RATE` overspends, returns
  0 (no sampling fits) with a :class:`RuntimeWarning`.

  Args:
    target_epsilon, delta: the budget (ε ≥ 0, δ in (0, 1)).
    sigma: noise multiplier(s) > 0.
    steps: number(s) of steps (whole numbers ≥ 0).
    accountant, rtol, orders: as in :func:`sigma`.
    sampler: a :mod:`jaxdp.sampling` sampler whose rate is solved for instead
      of plain Poisson sampling (scalar arguments): q for
      ``sampling.poisson`` (its capacity kept), the largest whole batch size B
      for the fixed, balls-in-bins and shuffle samplers, returned as B / N.
      ``steps`` are that sampler's steps. Build the sampler at the rate
      (``with_rate`` in ``jaxdp._sampler_api``) to train with it.

  Returns:
    q in [0, 1], float64 NumPy, the broadcast shape.
  """
  if sampler is not None:
    from jaxdp import _sampler_api  # pylint: disable=g-import-not-at-top
    if not _sampler_api.is_sampler(sampler):
      raise ValueError(f"sampler must be a jaxdp.sampling sampler; found {sampler!r}.")
    _validate_common(target_epsilon, delta, rtol, accountant)
    return _sampler_api.calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps,
                                                accountant, rtol, MIN_SAMPLING_RATE, orders)
  _validate_common(target_epsilon, delta, rtol, accountant)
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)
  shape = nx.check_same_shape(target_epsilon=target_epsilon, delta=delta, sigma=sigma,
                              steps=steps)
  orders_checked, orders_full = _resolve_orders(orders)
  t, d, ss, tt = _flat(shape, target_epsilon, delta, sigma, steps)
  out = np.ones(t.shape)
  idx = np.nonzero(tt > 0)[0]
  if idx.size:
    val, unr = _boundary("q", accountant, t[idx], d[idx], ss[idx], tt[idx], orders_checked,
                         orders_full, rtol)
    out[idx] = np.where(unr, 0.0, val)
    _warn_unreachable(f"q = {MIN_SAMPLING_RATE:g} already overspends; returning 0", unr,
                      t[idx], d[idx], ss[idx], tt[idx], ("sigma", "steps"))
  return nx.to_host(out.reshape(shape))


def _int_boundary(feasible, guess):
  """Largest integer T ≥ 0 with feasible(T) (monotone: true then false), batched.

  ``feasible(T, idx)`` evaluates the configurations ``idx`` at steps ``T``.
  Starts from ``guess`` (exact in the usual case: one call on T and T + 1),
  then gallops and bisects on the configurations where it was off.
  """
  n = guess.shape[0]
  guess = np.clip(np.floor(guess), 0.0, _MAX_STEPS)
  idx = np.arange(n)
  both = feasible(np.concatenate([guess, guess + 1.0]), np.concatenate([idx, idx]))
  f0, f1 = both[:n], both[n:]
  # lo: largest known feasible (T = 0 always is); hi: smallest known infeasible.
  lo = np.where(f1, guess + 1.0, np.where(f0, guess, 0.0))
  hi = np.where(f1, np.inf, np.where(f0, guess + 1.0, guess))
  step = np.ones(n)
  for _ in range(200):
    open_ = (hi - lo > 1) & (lo < _MAX_STEPS)
    if not open_.any():
      break
    sel = np.nonzero(open_)[0]
    l, h = lo[sel], hi[sel]
    probe = np.where(np.isinf(h), l + 2.0 * step[sel], np.floor((l + h) / 2.0))
    probe = np.where(np.isinf(h), np.minimum(probe, _MAX_STEPS), probe)
    ok = feasible(probe, sel)
    lo[sel] = np.where(ok, probe, l)
    hi[sel] = np.where(ok, h, probe)
    step[sel] *= 2.0
  lo = np.maximum(lo, 0.0)
  return np.where(lo >= _MAX_STEPS, np.inf, lo)


def steps(target_epsilon, delta, q, sigma, *, accountant: str = "rdp", orders=None):
  """Largest number of steps T with ε(q, σ, T, δ) ≤ target_epsilon, batched.

  Exact at the boundary: ``jaxdp.epsilon`` (the public path) certifies T
  within budget and T + 1 over it (ε is non-decreasing in T). Under RDP the
  answer comes in closed form per order — T_α = ⌊(ε_target - c_α(δ)) / ε_α⌋
  with c_α the conversion term of :func:`jaxdp.rdp.to_epsilon`, and the KL
  bound T_α ε_α < -log(1 - δ²) — maximised over α, then verified (and fixed by
  a galloping integer search if rounding put it off by one). Returns ``inf``
  where every T fits (q = 0, or more than 2**53 steps).

  Args:
    target_epsilon, delta: the budget (ε ≥ 0, δ in (0, 1)).
    q: sampling rate(s) in [0, 1], or a :mod:`jaxdp.sampling` sampler (then
      scalar arguments; steps of that sampler, epochs charged when started).
    sigma: noise multiplier(s) > 0.
    accountant: "rdp" or "pld".
    orders: RDP orders (default :data:`jaxdp.rdp.DEFAULT_ORDERS`).

  Returns:
    T as float64 NumPy whole numbers (or inf), the broadcast shape.
  """
  from jaxdp import _sampler_api  # pylint: disable=g-import-not-at-top
  if _sampler_api.is_sampler(q):  # batches from a jaxdp.sampling sampler
    _validate_common(target_epsilon, delta, 1e-6, accountant)
    return _sampler_api.calibrate_steps(q, target_epsilon, delta, sigma, accountant)
  _validate_common(target_epsilon, delta, 1e-6, accountant)
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  shape = nx.check_same_shape(target_epsilon=target_epsilon, delta=delta, q=q, sigma=sigma)
  orders_checked, orders_full = _resolve_orders(orders)
  t, d, qq, ss = _flat(shape, target_epsilon, delta, q, sigma)
  out = np.full(t.shape, np.inf)
  idx = np.nonzero(qq > 0)[0]
  if idx.size:
    with nx.x64():
      guess_orders = orders_full if accountant == "rdp" else np.asarray(_DEFAULT_CHEAP)
      (per,) = _map_chunks(_per_step_fn(_orders_key(guess_orders)), [qq[idx], ss[idx]],
                           [0.5, 1.0])
      guess = _closed_form_steps(per, guess_orders, t[idx], d[idx])
      acc = accountant

      def feasible(T, sel):
        e = _check_epsilon(acc, qq[idx][sel], ss[idx][sel], T, d[idx][sel], orders_checked)
        return e <= t[idx][sel]

      out[idx] = _int_boundary(feasible, np.where(np.isfinite(guess), guess, _MAX_STEPS))
  return nx.to_host(out.reshape(shape))


def _closed_form_steps(per, orders, target, delta):
  """max_α of the largest T meeting the RDP→(ε, δ) bound at order α."""
  a = np.asarray(orders)[None, :]
  c = np.log1p(-1.0 / a) - (np.log(delta)[:, None] + np.log(a)) / (a - 1.0)
  safety = 1.0 + 256.0 * np.finfo(np.float64).eps
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    t_conv = np.floor((target[:, None] / safety - c) / per)
    t_conv = np.where((target[:, None] / safety - c) < 0, -1.0, t_conv)
    kl = -np.log1p(-delta**2)[:, None]
    t_kl = np.ceil(kl / per) - 1.0
  cand = np.maximum(np.where(np.isnan(t_conv), -1.0, t_conv), np.where(np.isnan(t_kl), -1.0, t_kl))
  return np.maximum(np.max(cand, axis=-1), 0.0)


# --------------------------------------------------------------------------
# Differentiable ε and σ*(q) (pure, jittable)
# --------------------------------------------------------------------------


def _eps_and_partials(q, s, t_steps, d, orders):
  """ε and its partial derivatives (∂q, ∂σ, ∂T, ∂δ) at the minimising order.

  Envelope theorem: with e_α = T·r_α(q, σ) + log(1 - 1/α) - (log δ + log α)/(α-1)
  (Balle et al. 2020, Prop. 12) and ε = min_α e_α, the partials of ε are
  those of e_α* (Danskin). The per-order derivatives of r_α come from forward
  mode on the kernels; they are computed as *values* and sanitised, so the
  tangent maps below are plainly linear and NaN-free under transposition.
  """
  orders_np = np.asarray(orders)
  one = jnp.ones_like(q)
  per = lambda q_, s_: rdp.dpsgd_rdp(q_, s_, one, orders_np)
  r, r_q = jax.jvp(lambda q_: per(q_, s), (q,), (one,))
  _, r_s = jax.jvp(lambda s_: per(q, s_), (s,), (one,))
  eps, best = rdp.to_epsilon(t_steps[..., None] * r, orders_np, d)
  idx = jnp.argmax(jnp.asarray(orders_np, eps.dtype) == best[..., None], axis=-1)[..., None]
  pick = lambda a: jnp.take_along_axis(a, idx, axis=-1)[..., 0]
  safety = 1.0 + 256.0 * float(jnp.finfo(eps.dtype).eps)
  active = eps > 0
  clean = lambda a: jnp.where(active & jnp.isfinite(a), a * safety, 0.0)
  e_q = clean(t_steps * pick(r_q))
  e_s = clean(t_steps * pick(r_s))
  e_t = clean(pick(r))
  e_d = clean(-1.0 / (d * (best - 1.0)))
  return eps, e_q, e_s, e_t, e_d


def _promote(*xs):
  xs = [jnp.asarray(x) for x in xs]
  dtype = jnp.result_type(*xs, float)
  return jnp.broadcast_arrays(*[x.astype(dtype) for x in xs])


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _diff_eps(q, s, t_steps, d, orders_key):
  orders = np.asarray(orders_key)
  return rdp.to_epsilon(rdp.dpsgd_rdp(q, s, t_steps, orders), orders, d)[0]


@_diff_eps.defjvp
def _diff_eps_jvp(orders_key, primals, tangents):
  q, s, t_steps, d = primals
  dq, ds, dts, dd = tangents
  eps, e_q, e_s, e_t, e_d = _eps_and_partials(q, s, t_steps, d, orders_key)
  return eps, e_q * dq + e_s * ds + e_t * dts + e_d * dd


def differentiable_epsilon(q, sigma, steps, delta, orders=None):
  """DP-SGD ε under RDP with a custom JVP (envelope theorem); pure, jittable.

  Value: exactly :func:`jaxdp.rdp.dpsgd_epsilon`. Derivatives (forward and
  reverse mode) in q, σ, steps (as a real number) and δ: since
  ε = min_α e_α(q, σ, T, δ), Danskin's/envelope theorem gives
  dε = de_α*/dθ at the minimising order α*, computed on that single order
  (computed as sanitised values, so orders that are not selected cannot
  inject NaNs). At the switching
  points between orders ε has a kink and this is a one-sided derivative.

  Args:
    q, sigma, steps, delta: broadcast together.
    orders: concrete RDP orders (default :data:`jaxdp.rdp.DEFAULT_ORDERS`).

  Returns:
    ε, the broadcast shape.
  """
  orders = rdp.DEFAULT_ORDERS if orders is None else orders
  q, sigma, steps, delta = _promote(q, sigma, steps, delta)
  return _diff_eps(q, sigma, steps, delta, _orders_key(orders))


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _solve_sigma(t, d, q, t_steps, orders_key, rtol):
  orders = np.asarray(orders_key)
  xmin, xmax = _bounds("sigma")
  c = jnp.sqrt(2.0 * jnp.maximum(t_steps, 1.0) * jnp.log(1.0 / d))
  x0 = jnp.log(jnp.maximum(q * c / jnp.maximum(t, 1e-12), 1e-30))
  x0 = jnp.where(jnp.isfinite(x0), x0, xmax)
  s = _solve(lambda x: rdp.dpsgd_epsilon(q, jnp.exp(x), t_steps, d, orders), t, x0, xmin, xmax,
             0.5 * rtol)
  return jnp.where(s.has_hi, jnp.exp(s.hi), jnp.inf)


@_solve_sigma.defjvp
def _solve_sigma_jvp(orders_key, rtol, primals, tangents):
  t, d, q, t_steps = primals
  dt, dd, dq, dts = tangents
  sig = _solve_sigma(t, d, q, t_steps, orders_key, rtol)
  finite = jnp.isfinite(sig)
  s_safe = jnp.where(finite, sig, 1.0)
  _, e_q, e_s, e_t, e_d = _eps_and_partials(q, s_safe, t_steps, d, orders_key)
  ok = finite & (e_s < 0)
  inv = jnp.where(ok, 1.0 / jnp.where(ok, e_s, -1.0), 0.0)
  return sig, (dt - e_q * dq - e_t * dts - e_d * dd) * inv


def solve_sigma(target_epsilon, delta, q, steps, orders=None, rtol=1e-6):
  """σ*(ε_target, δ, q, T) under RDP: pure, jittable, differentiable.

  The in-``jit`` version of :func:`sigma` (same solver, no host-level
  feasibility check, ``steps`` may be a real number); its JVP follows from the
  implicit function theorem on ε(q, σ*, T, δ) = ε_target,

      dσ* = (dε_target - ∂ε/∂q dq - ∂ε/∂T dT - ∂ε/∂δ dδ) / (∂ε/∂σ),

  with the partial derivatives taken at the minimising order (envelope
  theorem). Returns inf where the target is out of reach. Use the host-level
  :func:`sigma` for answers that must be certified.
  """
  orders = rdp.DEFAULT_ORDERS if orders is None else orders
  t, d, q, steps = _promote(target_epsilon, delta, q, steps)
  return _solve_sigma(t, d, q, steps, _orders_key(orders), float(rtol))


# --------------------------------------------------------------------------
# DP-SGD hyperparameters
# --------------------------------------------------------------------------


class DPSGDPlan(NamedTuple):
  """A feasible DP-SGD configuration (arrays, one entry per problem)."""
  batch_size: np.ndarray   # expected batch size B = q·N (whole number)
  q: np.ndarray            # sampling rate B / N
  sigma: np.ndarray        # noise multiplier, certified by :func:`sigma`
  steps: np.ndarray        # T = ⌈E·N / B⌉
  noise_std: np.ndarray    # σ / B: noise std on the averaged gradient
  epsilon: np.ndarray      # ε actually spent (≤ target)


def optimize_dpsgd(dataset_size, epochs, target_epsilon, delta, *, min_batch_size=1,
                   max_batch_size=None, orders=None, num_iterations: int = 40,
                   learning_rate: float = 0.3, rtol: float = 1e-6) -> DPSGDPlan:
  """Chooses the batch size and σ minimising the noise on the averaged gradient.

  Objective, for each problem (N, E, ε, δ) (all broadcast):

      minimise  σ / (q N)    over q ∈ [B_min/N, B_max/N], σ > 0,
      subject to ε_RDP(q, σ, T = E/q, δ) ≤ ε_target,

  i.e. the standard deviation of the Gaussian noise on the averaged clipped
  gradient (sum of q·N expected clipped gradients plus N(0, σ²) noise, divided
  by q·N) after E epochs of Poisson-sampled DP-SGD. For each q the best σ is
  the calibrated σ*(q) (:func:`solve_sigma`), so the problem reduces to
  minimising J(q) = log σ*(q) - log q over one variable per problem. We
  parametrise log q = log q_min + (log q_max - log q_min)·sigmoid(u) and run
  ``optax.adam`` on u with gradients of σ*(q) from the implicit function
  theorem (custom JVP), all problems at once in one jitted ``lax.scan``.

  The answer is then snapped to a feasible point: the best iterate and the two
  ends of the batch-size range are rounded to whole batch sizes B, steps set to
  T = ⌈E·N/B⌉ and σ calibrated exactly by :func:`sigma` (certified); the one
  with the smallest σ/B is returned. Under RDP J usually decreases with q in
  the Gaussian regime (larger batches win at fixed epochs), so
  ``max_batch_size`` (memory, or a minimum number of steps E·N/B_max) is the
  constraint that matters most; the optimizer finds interior optima when the
  subsampled regime makes J non-monotone.

  Args:
    dataset_size: N (whole number ≥ 1).
    epochs: E > 0 (passes over the data).
    target_epsilon, delta: the budget.
    min_batch_size, max_batch_size: bounds on B (default 1 and N).
    orders: RDP orders (default :data:`jaxdp.rdp.DEFAULT_ORDERS`).
    num_iterations: Adam steps.
    learning_rate: Adam learning rate (on u).
    rtol: calibration tolerance.

  Returns:
    A :class:`DPSGDPlan` of float64 arrays with the broadcast shape.
  """
  nx.check_array("dataset_size", dataset_size, low=1.0, integer=True)
  nx.check_array("epochs", epochs, low=0.0, low_open=True)
  _validate_common(target_epsilon, delta, rtol, "rdp")
  nx.check_array("min_batch_size", min_batch_size, low=1.0, integer=True)
  if max_batch_size is not None:
    nx.check_array("max_batch_size", max_batch_size, low=1.0, integer=True)
  shape = nx.check_same_shape(dataset_size=dataset_size, epochs=epochs,
                              target_epsilon=target_epsilon, delta=delta)
  n_, e_, t_, d_ = _flat(shape, dataset_size, epochs, target_epsilon, delta)
  bmin = np.broadcast_to(np.asarray(min_batch_size, np.float64), shape).reshape(-1)
  bmax = n_ if max_batch_size is None else np.broadcast_to(
      np.asarray(max_batch_size, np.float64), shape).reshape(-1)
  bmax = np.minimum(bmax, n_)
  if np.any(bmin > bmax):
    i = int(np.argmax(bmin > bmax))
    raise ValueError(f"min_batch_size must not exceed max_batch_size or dataset_size; found "
                     f"{bmin[i]:g} > {bmax[i]:g} (first bad element at index {i}).")
  orders_checked, orders_full = _resolve_orders(orders)
  key = _orders_key(orders_full)
  with nx.x64():
    u_best = np.asarray(_adam_run(jnp.asarray(np.log(bmin / n_)), jnp.asarray(np.log(bmax / n_)),
                                  jnp.asarray(e_), jnp.asarray(t_), jnp.asarray(d_), key,
                                  float(rtol), int(num_iterations), float(learning_rate)))
  lqmin, lqmax = np.log(bmin / n_), np.log(bmax / n_)
  q_opt = np.exp(lqmin + (lqmax - lqmin) / (1.0 + np.exp(-u_best)))
  cands = np.stack([np.clip(np.round(q_opt * n_), bmin, bmax), bmin, bmax])
  best = None
  for b in cands:
    q = b / n_
    tt = np.ceil(e_ * n_ / b - 1e-9)
    s = np.asarray(sigma(t_, d_, q, tt, rtol=rtol, orders=orders_checked), np.float64).reshape(-1)
    noise = s / b
    if best is None:
      best = [b, q, s, tt, noise]
    else:
      take = noise < best[4]
      best = [np.where(take, new, old) for new, old in zip([b, q, s, tt, noise], best)]
  b, q, s, tt, noise = best
  eps = np.asarray(_check_epsilon_rdp(q, np.where(np.isfinite(s), s, 1.0), tt, d_,
                                      orders_checked))
  eps = np.where(np.isfinite(s), eps, np.inf)
  r = lambda x: nx.to_host(np.asarray(x, np.float64).reshape(shape))
  return DPSGDPlan(r(b), r(q), r(s), r(tt), r(noise), r(eps))


@functools.partial(jax.jit, static_argnums=(5, 6, 7, 8))
def _adam_run(lqmin, lqmax, epochs, target, delta, orders_key, rtol, iters, lr):
  import optax

  def objective(u):
    lq = lqmin + (lqmax - lqmin) * jax.nn.sigmoid(u)
    q = jnp.exp(lq)
    s = _solve_sigma(target, delta, q, epochs / q, orders_key, rtol)
    per = jnp.log(jnp.where(jnp.isfinite(s), s, 1e300)) - lq
    return jnp.sum(per), per

  opt = optax.adam(lr)
  u0 = jnp.zeros_like(lqmin)
  state = opt.init(u0)

  def step(carry, _):
    u, st, best_u, best_j = carry
    (_, per), g = jax.value_and_grad(objective, has_aux=True)(u)
    better = per < best_j
    best_u = jnp.where(better, u, best_u)
    best_j = jnp.where(better, per, best_j)
    upd, st = opt.update(g, st, u)
    return (optax.apply_updates(u, upd), st, best_u, best_j), None

  init = (u0, state, u0, jnp.full_like(u0, jnp.inf))
  (u, _, best_u, best_j), _ = jax.lax.scan(step, init, None, length=iters)
  _, per = objective(u)
  return jnp.where(per < best_j, u, best_u)

"""What the boundary solvers of :mod:`jaxdp.calibrate` evaluate.

The parametrisations x ↦ (q, σ), the chunked execution of the jitted solver
kernels (the in-jit mode of :func:`jaxdp._src.core.roots.solve_jit`,
optionally sharded, for :mod:`jaxdp.sweep`) and the certifying ε checks by
:func:`jaxdp.epsilon`. The drivers that use them are in
:mod:`jaxdp._src.solvers.boundary`; the public functions and the method are
described in :mod:`jaxdp.calibrate`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
from jaxdp._src.core.roots import _MAX_ITER, solve_jit
from jaxdp._src.core import persist

#: σ is searched in this range: σ = SIGMA_RANGE[0] is returned when it already
#: meets the target, inf when even SIGMA_RANGE[1] does not.
SIGMA_RANGE = (1e-3, 1e7)
#: Smallest sampling rate searched; below it ``sampling_rate`` returns 0.
MIN_SAMPLING_RATE = 1e-12
#: The largest number of steps (jaxdp.calibrate.MAX_STEPS).
MAX_STEPS = 2**53
# The same bound as a float (the solvers' brackets are float).
MAX_STEPS_FLOAT = float(MAX_STEPS)
_MAX_STEPS = MAX_STEPS_FLOAT

_CHUNK = 256           # configurations per jitted call (fixed: one compile)
_SMALL = 16            # chunk for small calls (single configurations, CLI)
_CHEAP_MAX_ORDER = 64  # integer orders up to this form the cheap phase-1 set

_D = rdp.DEFAULT_ORDERS
_DEFAULT_CHEAP = tuple(float(o) for o in _D[(_D == np.floor(_D)) & (_D <= _CHEAP_MAX_ORDER)])

# Optional sharding for the chunked kernels (set by jaxdp.sweep).
_SHARDING = contextvars.ContextVar("jaxdp_calibrate_sharding", default=None)


@contextlib.contextmanager
def _scoped(var, value):
  """``var`` set to ``value`` for the body (a context variable of this module)."""
  token = var.set(value)
  try:
    yield
  finally:
    var.reset(token)


def _use_sharding(sharding):
  return _scoped(_SHARDING, sharding)


# Set by a batched solve (more than _SMALL targets) for all of its rounds: the
# later rounds' few open targets keep the call's chunk length, so the call
# compiles one set of programs, not a second one for the last rounds (a fresh
# process's 1000 calibrations compiled the window solver and the public-path
# check again at 16 configurations for ~4.2 s, to finish 2 targets).
_LARGE_CALL = contextvars.ContextVar("jaxdp_calibrate_large_call", default=False)


def _large_call():
  return _scoped(_LARGE_CALL, True)


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
  """Chunk length: 16 for small calls, else 256 — only two shapes ever compile.

  Within a batched solve (:func:`_large_call`) every call takes 256."""
  return _SMALL if n <= _SMALL and not _LARGE_CALL.get() else _CHUNK


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

  def chunk(start):
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
    return tuple(np.asarray(r)[:m] for r in res)

  starts = range(0, n, size)
  # Chunks side by side on the CPU's cores (nx.thread_map); sharded calls
  # already spread over their devices.
  outs = [chunk(s) for s in starts] if sharding is not None else nx.thread_map(chunk, starts)
  return tuple(np.concatenate([o[i] for o in outs]) for i in range(len(outs[0])))


@functools.lru_cache(maxsize=64)
def _solver_fn(kind, orders_key, max_iter=_MAX_ITER):
  orders = np.asarray(orders_key)
  xmin, xmax = _bounds(kind)

  def run(x0, a, b, t, d, tol):
    def eps_of_x(x):
      q, s = _qs(kind, x, a)
      return rdp.dpsgd_epsilon(q, s, b, d, orders)

    s = solve_jit(eps_of_x, t, x0, xmin, xmax, tol, max_iter)
    q, sg = _qs(kind, s.hi, a)
    _, best = rdp.to_epsilon(rdp.dpsgd_rdp(q, sg, b, orders), orders, d)
    return s.hi, s.has_hi, s.eps_hi, best, s.has_lo

  return persist.jit(run)


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
    s = solve_jit(eps_of_x, t, x0, xmin, x0, tol)
    return s.hi, s.has_hi, s.eps_hi

  return persist.jit(run)


@functools.lru_cache(maxsize=32)
def _curve_fn(orders_key, with_order):
  orders = np.asarray(orders_key)

  def run(q, s, b, d):
    eps, best = rdp.to_epsilon(rdp.dpsgd_rdp(q, s, b, orders), orders, d)
    return (eps, best) if with_order else eps

  return persist.jit(run)


@functools.lru_cache(maxsize=32)
def _per_step_fn(orders_key):
  orders = np.asarray(orders_key)
  return persist.jit(lambda q, s: rdp.dpsgd_rdp(q, s, jnp.ones_like(q), orders))


def _orders_key(orders):
  return tuple(float(o) for o in np.asarray(orders, np.float64).ravel())


def _check_epsilon_rdp(q, s, t_steps, d, orders, with_order=False, margin_everywhere=False):
  """ε by :func:`jaxdp.epsilon` (the public path), sizes padded to the chunk.

  With ``with_order`` (default orders only): ``(ε, α)``, α the real order
  at which each ε was attained. Host values carry ``_HOST_MARGIN``; with
  ``margin_everywhere``, compiled values carry it too (each value once).
  """
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_driver  # pylint: disable=g-import-not-at-top
  n = q.shape[0]
  if orders is None and not with_order and 0 < n <= _SMALL:
    return _host_epsilon(q, s, t_steps, d)
  if orders is None and not with_order and n <= _HOST_ROUND_MAX and _host_round_turn():
    return _host_epsilon(q, s, t_steps, d)
  size = _chunk_size(n)

  def chunk(start):
    parts = [a[start:start + size] for a in (q, s, t_steps, d)]
    m = parts[0].shape[0]
    parts = [np.concatenate([p, np.full(size - m, v)]) for p, v in zip(parts, (0.5, 1.0, 1.0, 1e-5))]
    if with_order:
      e, alpha = rdp_driver.epsilon_and_order(*parts)
      return np.asarray(e, np.float64)[:m], np.asarray(alpha, np.float64)[:m]
    e = rate.epsilon(*parts, orders=None if orders is None else np.asarray(orders))
    return np.asarray(e, np.float64)[:m], None

  outs = nx.thread_map(chunk, range(0, n, size))   # chunks side by side on the CPU's cores
  eps = np.concatenate([o[0] for o in outs]) if outs else np.zeros(0)
  if margin_everywhere:
    eps = eps * (1.0 + _HOST_MARGIN)
  if with_order:
    return eps, (np.concatenate([o[1] for o in outs]) if outs else np.zeros(0))
  return eps


# A small calibration's probe rounds (a few targets x 16 probes) are answered
# on the host during the first _HOST_ROUNDS such rounds of a process: a round
# costs ~0.1-0.4 s there (up to 64 configurations), where the compiled
# programs of the 256-configuration chunk first take ~7-9 s to build (two
# quadrature variants, as the probes' σ span both sides of 0.5) on a 2-core
# CPU. A handful of calibrations (~5 rounds each) thus compile nothing; a
# loop of them pays the compilation once the rounds are used up.
_HOST_ROUND_MAX = 64
_HOST_ROUNDS = 24
_host_rounds = nx.HostBudget(_HOST_ROUNDS)


def _host_round_turn():
  """Whether this probe round takes the host path (and counts one round)."""
  return _host_rounds.take()


# The host path (jaxdp._src.kernels.host_rdp) and the compiled one agree to 2e-13
# relative down to sigma = 0.01 (tests/kernels/test_host_rdp.py); a host value inflated by this margin
# that meets a target meets it on either path of jaxdp.epsilon.
_HOST_MARGIN = 1e-10


def _host_epsilon(q, s, t_steps, d):
  """ε of a few configurations (default orders) on the host, no compilation,
  with the nodes :func:`jaxdp.epsilon` would use for each on its own."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  eps = np.empty(q.shape[0])
  for sel, nodes in _host_rdp.node_groups(s):
    eps[sel] = _host_rdp.minimum_over_all_orders("epsilon", "improved", q[sel], s[sel],
                                                 t_steps[sel], d[sel], nodes)
  return eps * (1.0 + _HOST_MARGIN)


def _check_epsilon(kind_acc, q, s, t_steps, d, orders, want_lower=True, margin_everywhere=False):
  if kind_acc == "pld":
    from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
    if q.shape[0] == 0:
      return np.zeros(0)
    # jaxdp.epsilon(accountant="pld")'s value, except that the RDP bound beside
    # the PLD's is the guards' cheap ceiling wherever the full default-orders
    # value could only lie inside the certified interval (pld._rdp_ceiling):
    # an upper bound on ε either way, and never below jaxdp.epsilon's value,
    # so a σ that meets the target here meets it there.
    with nx.x64():
      _, up, rdp_up = pld.guarded_bounds("epsilon", q, s, t_steps, d, full_rdp=False,
                                         want_lower=want_lower)
    return np.minimum(up, rdp_up).reshape(-1)
  return _check_epsilon_rdp(q, s, t_steps, d, orders, margin_everywhere=margin_everywhere)


def _from_x(kind, x):
  xmin, _ = _bounds(kind)
  if kind == "sigma":
    return np.where(x <= xmin, SIGMA_RANGE[0], np.exp(x))
  return np.where(x <= xmin, 1.0, np.exp(-x))


# --------------------------------------------------------------------------
# The first guess of calibrate.steps
# --------------------------------------------------------------------------


def _default_orders_guess(q, sigma, target, delta):
  """The first guess of :func:`jaxdp.calibrate.steps` for the default orders
  (every real α > 1), batched, from programs the public path compiles anyway.

  The closed form over the cheap integer orders α ≤ 64 (a lower estimate: a
  smaller order set allows fewer steps), then again at the real order α* where
  ``jaxdp.epsilon`` attains its value at that estimate (one quadrature per
  configuration, the public path's pair program), the larger of the two. It
  is only a guess: ``calibrate._int_boundary`` verifies T and T + 1 by the
  public path (ε inflated by the host checks' 1e-10 margin) and searches
  where it was off: the answer does not depend on the guess, except at a huge
  T where ε(T) sits within that margin of the target and the checks that run
  decide which of two sound neighbours is returned.
  (The closed form over all 179 grid orders compiled a program of its own,
  ~3.2 s of a fresh process's 10.5 s for 1000 targets.)
  """
  cheap = np.asarray(_DEFAULT_CHEAP)
  (per,) = _map_chunks(_per_step_fn(_orders_key(cheap)), [q, sigma], [0.5, 1.0])
  guess = _closed_form_steps(per, cheap, target, delta)
  at = np.clip(guess, 1.0, _MAX_STEPS)
  _, alpha = _check_epsilon_rdp(q, sigma, at, delta, None, with_order=True)
  ok = np.isfinite(alpha) & (alpha > 1.0)
  alpha = np.where(ok, alpha, 2.0)
  nodes = rdp._nodes_for(sigma)   # pylint: disable=protected-access
  (per_a,) = _map_chunks(lambda a, b, c: rdp._traced_kernel(a, b, c, nodes),  # pylint: disable=protected-access
                         [q, sigma, alpha], [0.5, 1.0, 2.0])
  at_alpha = _closed_form_steps(per_a[:, None], alpha[:, None], target, delta)
  return np.maximum(guess, np.where(ok, at_alpha, 0.0))


def _closed_form_steps(per, orders, target, delta):
  """max_α of the largest T meeting the RDP→(ε, δ) bound at order α.

  ``orders``: 1-D (shared by every row) or (rows, k), like ``per``."""
  a = np.asarray(orders)
  a = a[None, :] if a.ndim == 1 else a
  c = np.log1p(-1.0 / a) - (np.log(delta)[:, None] + np.log(a)) / (a - 1.0)
  safety = 1.0 + 256.0 * np.finfo(np.float64).eps
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    t_conv = np.floor((target[:, None] / safety - c) / per)
    t_conv = np.where((target[:, None] / safety - c) < 0, -1.0, t_conv)
    kl = -np.log1p(-delta**2)[:, None]
    t_kl = np.ceil(kl / per) - 1.0
  cand = np.maximum(np.where(np.isnan(t_conv), -1.0, t_conv), np.where(np.isnan(t_kl), -1.0, t_kl))
  return np.maximum(np.max(cand, axis=-1), 0.0)

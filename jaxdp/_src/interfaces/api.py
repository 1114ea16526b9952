"""Top-level DP-SGD entry points: ``jaxdp.epsilon`` and ``jaxdp.delta``.

Host-level: arguments are validated eagerly, the computation runs in float64
(scoped, the user's ``jax_enable_x64`` is left alone) over chunks of a fixed
size, so arbitrarily large grids compile once and fit in memory.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import continuous_order as _continuous_order
from jaxdp._src.kernels import order_search as _order_search
from jaxdp._src.kernels.rdp import _nodes_for as rdp_nodes_for

_CHUNK = 2048


def _validate_common(q, sigma, steps):
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)


def _validate_orders(orders):
  if orders is None:
    return None
  orders = np.atleast_1d(np.asarray(orders, dtype=np.float64))
  if orders.ndim != 1 or orders.size == 0:
    raise ValueError(f"orders must be a non-empty 1-D sequence; found shape {orders.shape}.")
  nx.check_array("orders", orders, low=1.0, low_open=True, allow_inf=True)
  return orders


@functools.lru_cache(maxsize=32)
def _chunk_fn(kind: str, orders_key, method: str, nodes: int):
  from jaxdp._src.kernels import rdp
  orders = None if orders_key is None else np.asarray(orders_key)
  if kind == "epsilon":
    fn = lambda q, s, t, x: rdp.dpsgd_epsilon(q, s, t, x, orders, method, _nodes=nodes)
  else:
    fn = lambda q, s, t, x: rdp.dpsgd_delta(q, s, t, x, orders, _nodes=nodes)
  return jax.jit(fn)


# Chunk lengths: every call pads to one of these, so a few configurations,
# one configuration and a thousand reuse the same three compiled programs
# (the persistent cache of the CLI keys on them too).
_BUCKETS = (16, 256, _CHUNK)


def _bucket(n):
  """Chunk length for n configurations: the smallest bucket >= n (at most _CHUNK)."""
  return next((b for b in _BUCKETS if n <= b), _CHUNK)


# The first few small questions of a process are answered on the host
# (jaxdp._src.kernels.host_rdp: NumPy, the same formulas, ~40 ms each, nothing to
# compile); later ones go to the compiled programs (~5 ms each once built,
# ~5 s to build on a 2-core CPU), so a loop of single questions pays the
# compilation once instead of 40 ms per question.
_HOST_QUESTIONS = 8
_host_questions_left = [_HOST_QUESTIONS]


def _host_turn(n):
  """Whether n configurations take the host path (and count one question)."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  if 0 < n <= _host_rdp.MAX_CONFIGURATIONS and _host_questions_left[0] > 0:
    _host_questions_left[0] -= 1
    return True
  return False


# The RDP ceiling that guards a PLD answer (jaxdp.pld's guards) is computed
# on the host for up to this many configurations, during the first
# _PLD_GUARD_QUESTIONS guarded PLD calls of a process: there it costs
# ~40-150 ms (32-256 configurations) beside the PLD's own ~20 ms per
# configuration, where the compiled programs would first take ~4 s to build.
# 64 calls of ~50 ms on the host cost about that build, so a loop of single
# questions pays at most twice the compilation, and a PLD calibration's
# rounds (a dozen, two guarded calls each) compile no RDP program.  Later
# calls use the compiled programs.  The two paths agree to 2e-13 relative
# (tests/test_host_rdp.py).
_PLD_GUARD_HOST_MAX = 256
_PLD_GUARD_QUESTIONS = 64
_pld_guard_questions_left = [_PLD_GUARD_QUESTIONS]


def guard_rdp(kind, q, sigma, steps, x):
  """The default-order RDP ε (kind "epsilon", x = δ) or δ (kind "delta",
  x = ε) that ceils a PLD answer, float64 NumPy of the broadcast shape."""
  n = int(np.prod(np.broadcast_shapes(*(np.shape(a) for a in (q, sigma, steps, x)))))
  host = 0 < n <= _PLD_GUARD_HOST_MAX and _pld_guard_questions_left[0] > 0
  if host:
    _pld_guard_questions_left[0] -= 1
  return _run_chunked(kind, q, sigma, steps, x, None, "improved", host=host)


def _run_chunked(kind, q, sigma, steps, x, orders, method, with_order=False, host=False):
  """The RDP value per configuration, chunked; with ``with_order`` (default
  orders only) also the real order at which it was attained.  ``host``:
  True forces the host path for the default orders (:mod:`jaxdp._src.kernels.host_rdp`),
  otherwise :func:`_host_turn` decides."""
  shape = np.broadcast_shapes(*(np.shape(a) for a in (q, sigma, steps, x)))
  flat = [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1) for a in (q, sigma, steps, x)]
  n = flat[0].size
  key = None if orders is None else tuple(float(o) for o in orders)
  search_plan = _order_search.plan(key)
  if with_order and (orders is not None or search_plan is None):
    raise ValueError("with_order needs the default orders.")
  if orders is None and search_plan is not None and (host or _host_turn(n)):
    from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
    res = _host_rdp.minimum_over_all_orders(kind, method, *flat, rdp_nodes_for(flat[1]),
                                            with_order=with_order)
    result, alpha = res if with_order else (res, None)
  else:
    result, alpha = _compiled_chunks(kind, flat, key, search_plan, method, with_order)
  if kind == "delta":
    result = delta_floor(result, flat[0], flat[2], flat[3])
  if with_order:
    return result.reshape(shape), alpha.reshape(shape)
  return result.reshape(shape)


def _compiled_chunks(kind, flat, key, search_plan, method, with_order):
  """:func:`_run_chunked` through the compiled programs, chunk by chunk:
  ``(values, orders attained or None)`` as flat NumPy arrays."""
  n = flat[0].size
  chunk = _bucket(n)

  def one(start):
    parts = [a[start:start + chunk] for a in flat]
    # Fewer quadrature nodes suffice when every σ in the chunk is ≥ 0.5.
    nodes = rdp_nodes_for(parts[1])
    m = parts[0].size
    if m < chunk:  # pad with a benign configuration to reuse the compiled shape
      pad = [np.full(chunk - m, v) for v in (0.5, 1.0, 1.0, 0.5)]
      parts = [np.concatenate([p, f]) for p, f in zip(parts, pad)]
    alpha = None
    if search_plan is not None and key is None:
      # Default: the grid minimum, then the minimum over all real α > 1.
      res, best = _order_search.search(kind, search_plan, method, nodes, *parts, with_index=True)
      res = _continuous_order.refine(kind, method, nodes, res, search_plan.orders, best, *parts,
                                     with_order=with_order)
      if with_order:
        res, alpha = res
        alpha = np.asarray(alpha)[:m]
    elif search_plan is not None:  # many orders: evaluate only those that can win
      res = _order_search.search(kind, search_plan, method, nodes, *parts)
    else:
      res = _chunk_fn(kind, key, method, nodes)(*(jnp.asarray(p) for p in parts))
    return np.asarray(res)[:m], alpha

  outs = nx.thread_map(one, range(0, n, chunk))   # chunks side by side on the CPU's cores
  result = np.concatenate([o[0] for o in outs]) if outs else np.zeros((0,))
  if not with_order:
    return result, None
  return result, (np.concatenate([o[1] for o in outs]) if outs else np.zeros((0,)))


def epsilon_and_order(q, sigma, steps, delta):
  """Internal: :func:`epsilon` (RDP, default orders, validated by the caller)
  and the real order α > 1 at which each value was attained (float64 NumPy)."""
  with nx.x64():
    return _run_chunked("epsilon", q, sigma, steps, delta, None, "improved", with_order=True)


def delta_floor(delta, q, steps, epsilon):
  """δ upper bounds never below the smallest normal float where the true δ is positive.

  With q > 0, at least one step and finite ε the Gaussian's δ(ε) is positive,
  but a δ below ~2.2e-308 underflows to a subnormal or to 0 (the slow harness
  found an exact one-step δ of 8.45e-322 reported as 0). A computed bound
  below the smallest normal number means the true δ is below it too, so
  raising it there keeps it an upper bound.
  """
  q, steps, epsilon = (np.broadcast_to(np.asarray(a, np.float64), np.shape(delta))
                       for a in (q, steps, epsilon))
  live = (q > 0) & (steps >= 1) & np.isfinite(epsilon)
  return np.where(live, np.maximum(delta, np.finfo(np.float64).tiny), delta)


def is_sampler(x) -> bool:
  """Whether ``x`` is a :mod:`jaxdp.sampling` sampler (duck-typed, so that the
  plain-rate path never imports the sampler machinery and its SciPy)."""
  return hasattr(x, "event") and hasattr(x, "dataset_size") and not isinstance(x, np.ndarray)


def epsilon(q, sigma, steps, delta, *, accountant: str = "rdp", orders=None,
            method: str = "improved"):
  """ε of DP-SGD: ``steps`` compositions of the Poisson-sampled Gaussian.

  Broadcasts over all of ``q``, ``sigma``, ``steps`` and ``delta`` (e.g. a
  100×100 grid of (q, σ) in one call) and returns float64 NumPy values that
  upper-bound the true ε.

  With RDP and an explicit ``orders`` list the result is the minimum over
  those orders of the converted ε(α) (:func:`jaxdp.rdp.dpsgd_epsilon`); for
  large order sets only the orders that can still attain the minimum are
  evaluated (convexity bounds, see ``jaxdp._src.kernels.order_search``), with the same
  value. With ``orders=None`` (default) it is the minimum over all real
  α > 1: the grid minimum over :data:`jaxdp.rdp.DEFAULT_ORDERS`, refined by
  a golden-section search between the best order's grid neighbours
  (``jaxdp._src.kernels.continuous_order``), never above the grid value.

  Args:
    q: sampling rate(s) in [0, 1] (Poisson sampling), or a sampler from
      :mod:`jaxdp.sampling` (then ``steps`` counts training steps and the
      sampler's own event is accounted; see ``jaxdp._src.samplers.sampler_api``).
    sigma: noise multiplier(s) > 0.
    steps: number(s) of steps, whole numbers ≥ 0.
    delta: target δ in (0, 1).
    accountant: "rdp" (Mironov–Talwar–Zhang RDP, then the improved
      conversion) or "pld" (tight, privacy-loss distributions; see
      :mod:`jaxdp.pld`).  The PLD answer passes the runtime guards of
      :mod:`jaxdp._src.kernels.guards` (ε_T >= exact one-step ε, ordered interval) and
      is the best certified upper bound: the kernel's, the general PLD
      engine's where the kernel's interval is +∞ or over 10% wide (up to 4
      configurations per call, seconds each) and the RDP bound, whichever
      is smallest (:mod:`jaxdp._src.pld.fallback`); the same number as
      :func:`jaxdp.pld.epsilon` and ``jaxdp.accountant.pld()``. The default stays
      "rdp": its kernels are jittable, broadcast over whole grids and cost
      microseconds per configuration once compiled, while the PLD is a
      host-level computation whose first call compiles several programs.
      Ask for "pld" for the tightest single answer.
    orders: RDP orders (default None: every real α > 1); RDP only.
    method: RDP→(ε,δ) conversion, "improved" or "classic"; RDP only.

  Returns:
    ε as ``numpy.float64`` (scalar inputs) or ``numpy.ndarray``.

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  if is_sampler(q):
    from jaxdp._src.samplers import sampler_api as _sampler_api  # pylint: disable=g-import-not-at-top
    return _sampler_api.epsilon(q, sigma, steps, delta, accountant, orders)
  _validate_common(q, sigma, steps)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, delta=delta)
  if accountant == "pld":
    from jaxdp._src.pld import kernel as pld
    # The best certified answer (jaxdp._src.pld.fallback): the kernel's upper
    # bound, guarded (jaxdp._src.kernels.guards), intersected with the general engine's
    # where the kernel's interval is +∞ or wide, and never above the RDP
    # bound; the very number jaxdp.pld.epsilon and accountant.pld() return.
    with nx.x64():
      _, eps, _ = pld.guarded_bounds("epsilon", q, sigma, steps, delta, best=True,
                                     rdp_value=False)
    return nx.to_host(eps)
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  if method not in ("improved", "classic"):
    raise ValueError(f"method must be 'improved' or 'classic'; found {method!r}.")
  orders = _validate_orders(orders)
  with nx.x64():
    return nx.to_host(_run_chunked("epsilon", q, sigma, steps, delta, orders, method))


def delta(q, sigma, steps, epsilon, *, accountant: str = "rdp", orders=None):
  """δ of DP-SGD at ``epsilon`` (see :func:`epsilon` for the arguments).

  Returns:
    δ ∈ (0, 1] upper-bounding the true δ, float64 NumPy.
  """
  if is_sampler(q):
    from jaxdp._src.samplers import sampler_api as _sampler_api  # pylint: disable=g-import-not-at-top
    return _sampler_api.delta(q, sigma, steps, epsilon, accountant, orders)
  _validate_common(q, sigma, steps)
  nx.check_array("epsilon", epsilon, low=0.0)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, epsilon=epsilon)
  if accountant == "pld":
    from jaxdp._src.pld import kernel as pld
    with nx.x64():   # the best certified answer, as for epsilon above
      _, tight, _ = pld.guarded_bounds("delta", q, sigma, steps, epsilon, best=True)
    return nx.to_host(tight)
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  orders = _validate_orders(orders)
  with nx.x64():
    return nx.to_host(_run_chunked("delta", q, sigma, steps, epsilon, orders, "improved"))


# tight_one's general-engine interval is widened by the batched path's best
# answer where it is +∞ or wider than this fraction (the issue-35 width goal;
# the batched path costs seconds of compilation in a fresh process).
_CLI_WIDE = 0.01


def tight_one(name, q, sigma, steps, value, *, rtol=1e-3):
  """The tight (PLD) answer to one question, with nothing to compile.

  One Poisson-sampled Gaussian configuration (add/remove), composed ``steps``
  times, by the general PLD engine (:mod:`jaxdp.pld_general`: NumPy/SciPy
  FFTs, certified pessimistic/optimistic interval, its own runtime guards),
  and the RDP bound beside it (the host path of :func:`epsilon`). This is
  what the ``jaxdp`` command answers: a fresh process would otherwise spend
  seconds compiling the batched kernel (:mod:`jaxdp.pld`) for one
  configuration. Both engines are certified; their intervals overlap (tested).
  Where the general engine cannot answer (a grid beyond its memory budget,
  e.g. σ = 1e-4) the answer is the batched path's, exactly what
  :func:`epsilon` / :func:`delta` with ``accountant="pld"`` report
  (:func:`_kernel_one`), never an error about an internal grid; where its
  interval is +∞ or over 1% wide (:data:`_CLI_WIDE`; e.g. 8.6% at q = 1e-3,
  σ = 1, T = 10⁵, δ = 1e-12) it is intersected with that answer's.

  Args:
    name: "epsilon" (``value`` is δ) or "delta" (``value`` is ε).
    q, sigma, steps, value: scalars, validated as in :func:`epsilon`.
    rtol: target relative accuracy of the PLD grid.

  Returns:
    ``(lower, upper, rdp_upper)`` floats: the certified PLD interval (after
    the guards :func:`jaxdp._src.kernels.guards.check`, which also hold it below the RDP
    bound) and the RDP upper bound. The answer to report is
    ``min(upper, rdp_upper)``: both are upper bounds.
  """
  from jaxdp._src.kernels import guards as _guards  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  from jaxdp._src.solvers.tight import poisson_phases  # pylint: disable=g-import-not-at-top
  _validate_common(q, sigma, steps)
  if name == "epsilon":
    nx.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", value, low=0.0)
  q, sigma, steps, value = (float(np.asarray(a, np.float64)) for a in (q, sigma, steps, value))
  with nx.x64():
    rdp_up = float(_run_chunked(name, q, sigma, steps, value, None, "improved"))
  if q == 0.0 or steps == 0.0:
    return 0.0, 0.0, rdp_up
  phases = poisson_phases(q, sigma, steps)
  fn = pld_general.epsilon if name == "epsilon" else pld_general.delta
  try:
    lo, up = fn(phases, value, rtol=rtol, return_bounds=True)
  except pld_general.GridTooLarge:
    return _kernel_one(name, q, sigma, steps, value)
  from jaxdp._src.pld import fallback as _pld_fallback  # pylint: disable=g-import-not-at-top
  wide, _ = _pld_fallback._wide(name, np.atleast_1d(lo), np.atleast_1d(up),  # pylint: disable=protected-access
                                np.atleast_1d(value), threshold=_CLI_WIDE)
  if wide[0]:   # +∞ or wide: the batched path's best answer, intersected with this one
    k_lo, k_up, rdp_up = _kernel_one(name, q, sigma, steps, value)
    b_lo, b_up = _pld_fallback.combine(k_lo, k_up, float(np.ravel(lo)[0]),
                                       float(np.ravel(up)[0]))
    return float(b_lo), float(b_up), rdp_up
  # One-step consistency was checked by pld_general's own guard (for ε as
  # δ_1(ε_upper) <= δ); the one-step δ raises the lower bound for δ.
  one = (pld_general.one_step_delta(phases, value) if name == "delta" else None)
  one = np.zeros(1) if one is None else np.atleast_1d(one) * (1.0 - 1e-6)
  lo, up = _guards.check(name, np.atleast_1d(lo), np.atleast_1d(up), one, np.ones(1, bool),
                         lambda mask: np.full(int(mask.sum()), rdp_up), certified_upper=rdp_up)
  return float(lo[0]), float(up[0]), rdp_up


def _kernel_one(name, q, sigma, steps, value):
  """:func:`tight_one` where the general engine cannot answer (its grid would
  exceed the memory budget, e.g. σ = 1e-4) or answers +∞ or wide: the best
  certified interval of the batched path (``pld.guarded_bounds(best=True)``,
  its upper end already capped by RDP) and the RDP bound, the very numbers
  :func:`epsilon` / :func:`delta` with ``accountant="pld"`` report, at the
  price of compiling the kernel (seconds, once per process)."""
  from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
  with nx.x64():
    lo, up, rdp_up = pld.guarded_bounds(name, q, sigma, steps, value, best=True)
  return float(lo), float(up), float(rdp_up)

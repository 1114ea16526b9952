"""The chunked RDP driver behind every host-level RDP question.

Validates (q, σ, T) and the order list, then evaluates the minimum over RDP
orders of ε (or δ) per configuration: either on the host
(:mod:`jaxdp._src.kernels.host_rdp`, for small batches of the default
orders, nothing to compile) or through compiled programs over chunks of a
fixed bucket size, so arbitrarily large grids compile once and fit in memory.
Float64 throughout (scoped by the caller).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import continuous_order as _continuous_order
from jaxdp._src.kernels import order_search as _order_search
from jaxdp._src.kernels.rdp import _nodes_for as rdp_nodes_for
from jaxdp._src.core import persist


_CHUNK = 2048


def validate_rate_inputs(q, sigma, steps):
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)


def validate_orders(orders):
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
  return persist.jit(fn)


# Chunk lengths: every call pads to one of these, so a few configurations,
# one configuration and a thousand reuse the same three compiled programs
# (the persistent cache of the CLI keys on them too).
_BUCKETS = (16, 256, _CHUNK)


def _bucket(n):
  """Chunk length for n configurations: the smallest bucket >= n (at most _CHUNK)."""
  return next((b for b in _BUCKETS if n <= b), _CHUNK)


# The first small questions of a process are answered on the host
# (jaxdp._src.kernels.host_rdp: NumPy, the same formulas, ~30 ms each on the
# 2-core CPU, nothing to compile); later ones go to the compiled programs
# (~6 ms each once built, ~2.9 s to build the 16-configuration chunk's four
# programs). 64 host questions cost about that build (as the PLD guard's
# budget below), so a loop of single questions pays at most about twice
# what the better of the two paths would have cost it; with 8, a loop of 9
# questions (e.g. a second tradeoff.calibrate_sigma, whose rounds each ask
# one) took 3.1 s instead of 0.3 s.
_HOST_QUESTIONS = 64


_host_questions = nx.HostBudget(_HOST_QUESTIONS)


def _host_turn(n):
  """Whether n configurations take the host path (and count one question)."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  return 0 < n <= _host_rdp.MAX_CONFIGURATIONS and _host_questions.take()


# The RDP ceiling that guards a PLD answer (jaxdp.pld's guards) is computed
# on the host for up to this many configurations, during the first
# _PLD_GUARD_QUESTIONS guarded PLD calls of a process: there it costs
# ~40-150 ms (32-256 configurations) beside the PLD's own ~20 ms per
# configuration, where the compiled programs would first take ~4 s to build.
# 64 calls of ~50 ms on the host cost about that build, so a loop of single
# questions pays at most twice the compilation, and a PLD calibration's
# rounds (a dozen, two guarded calls each) compile no RDP program.  Later
# calls use the compiled programs.  The two paths agree to 2e-13 relative
# (tests/kernels/test_host_rdp.py).
_PLD_GUARD_HOST_MAX = 256


_PLD_GUARD_QUESTIONS = 64


_pld_guard_questions = nx.HostBudget(_PLD_GUARD_QUESTIONS)


def guard_rdp(kind, q, sigma, steps, x):
  """The default-order RDP ε (kind "epsilon", x = δ) or δ (kind "delta",
  x = ε) that ceils a PLD answer, float64 NumPy of the broadcast shape."""
  n = int(np.prod(np.broadcast_shapes(*(np.shape(a) for a in (q, sigma, steps, x)))))
  host = 0 < n <= _PLD_GUARD_HOST_MAX and _pld_guard_questions.take()
  return run_chunked(kind, q, sigma, steps, x, None, "improved", host=host)


def run_chunked(kind, q, sigma, steps, x, orders, method, with_order=False, host=False):
  """The RDP value per configuration, chunked; with ``with_order`` (default
  orders only) also the real order at which it was attained.  ``host``:
  True forces the host path (:mod:`jaxdp._src.kernels.host_rdp`; default orders, or an
  explicit list with a search plan),
  otherwise :func:`_host_turn` decides."""
  shape = np.broadcast_shapes(*(np.shape(a) for a in (q, sigma, steps, x)))
  flat = [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1) for a in (q, sigma, steps, x)]
  n = flat[0].size
  key = None if orders is None else tuple(float(o) for o in orders)
  search_plan = _order_search.plan(key)
  if with_order and (orders is not None or search_plan is None):
    raise ValueError("with_order needs the default orders.")
  if search_plan is not None and (host or _host_turn(n)):
    from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
    if orders is None:
      res = _host_rdp.minimum_over_all_orders(kind, method, *flat, rdp_nodes_for(flat[1]),
                                              with_order=with_order)
      result, alpha = res if with_order else (res, None)
    else:   # an explicit order list (e.g. dp_accounting's): its grid minimum
      result, alpha = _host_rdp.grid_minimum(kind, method, search_plan, *flat,
                                             rdp_nodes_for(flat[1]))[0], None
  else:
    result, alpha = _compiled_chunks(kind, flat, key, search_plan, method, with_order)
  if kind == "delta":
    result = delta_floor(result, flat[0], flat[2], flat[3])
  if with_order:
    return result.reshape(shape), alpha.reshape(shape)
  return result.reshape(shape)


def _pieces(n, chunk, sigma, split=True, built=lambda size, nodes: False):
  """``[(start, length, nodes)]``: the compiled calls that cover n configurations.

  Each chunk of ``chunk`` configurations takes the quadrature nodes that its
  σ allow (:func:`jaxdp._src.kernels.rdp._nodes_for`). On the CPU the last
  chunk runs instead as pieces of the 256 bucket when it is the only chunk
  and holds at most 1280 configurations (a 256 piece costs ~0.17 of a 2048
  chunk) or the CPU has several cores: XLA:CPU runs one computation on one
  core, so the pieces run side by side (1000 configurations: 0.95 s ->
  0.38 s, 300: 1.5 s -> 0.24 s on 2 cores). The last of several chunks runs
  as pieces (at most 1280 configurations) only where ``built(256, nodes)``
  says that the 256 bucket's programs are already built in this process:
  building them takes ~2.5 s on the 2-core CPU, against ~0.2-0.4 s for the
  padded chunk (a 200×200×2 sweep: 13.5 s -> 11 s in a fresh process). So
  the plan depends on what the process ran before; the values must not (see
  below). Each piece takes the nodes of its whole chunk, so every
  configuration is evaluated by the same formulas with the same nodes as in
  the chunk.

  The values: the same on 48 000 configurations over the whole domain
  (tests/kernels/test_rdp_driver_pieces.py). The compiled base-order kernel
  (exact sums at the integer orders ≤ 64) rounds the last bit of ~0.2% of
  its entries differently at the 256 and 2048 shapes, which reaches the
  answer only where a base order beats the golden section between orders;
  with an explicit order list (no golden section) it reaches ~2% of the
  answers (≤ 5e-13 relative, within every value's rounding allowance), so
  explicit orders keep whole chunks (``split=False``).
  """
  small = _BUCKETS[1]
  starts = list(range(0, n, chunk))
  if not starts:   # no configurations: no calls
    return []
  pieces = [(start, chunk, rdp_nodes_for(sigma[start:start + chunk])) for start in starts]
  last, rest, cores = starts[-1], n - starts[-1], nx.cpu_cores()
  nodes = pieces[-1][2]
  if split and chunk > small and cores >= 1 and (
      (len(starts) == 1 and (rest <= 5 * small or cores >= 2))
      or (rest <= 5 * small and built(small, nodes))):
    pieces.pop()
    pieces += [(start, small, nodes) for start in range(last, n, small)]
  return pieces


# (kind, orders, method, with_order, nodes, size) of the chunk programs
# this process has run (:func:`_pieces` splits the last of several chunks
# only into pieces that are already built).
_built = set()


def _compiled_chunks(kind, flat, key, search_plan, method, with_order):
  """:func:`run_chunked` through the compiled programs, chunk by chunk:
  ``(values, orders attained or None)`` as flat NumPy arrays."""
  n = flat[0].size
  chunk = _bucket(n)

  def one(piece):
    start, size, nodes = piece
    parts = [a[start:start + size] for a in flat]
    m = parts[0].size
    if m < size:  # pad with a benign configuration to reuse the compiled shape
      pad = [np.full(size - m, v) for v in (0.5, 1.0, 1.0, 0.5)]
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
    _built.add((kind, key, method, with_order, nodes, size))
    return np.asarray(res)[:m], alpha

  # Pieces for the default orders only; explicit orders keep whole chunks.
  built = lambda size, nodes: (kind, key, method, with_order, nodes, size) in _built
  outs = nx.thread_map(one, _pieces(n, chunk, flat[1], split=key is None, built=built))
  result = np.concatenate([o[0] for o in outs]) if outs else np.zeros((0,))
  if not with_order:
    return result, None
  return result, (np.concatenate([o[1] for o in outs]) if outs else np.zeros((0,)))


def epsilon_and_order(q, sigma, steps, delta):
  """Internal: :func:`epsilon` (RDP, default orders, validated by the caller)
  and the real order α > 1 at which each value was attained (float64 NumPy)."""
  with nx.x64():
    return run_chunked("epsilon", q, sigma, steps, delta, None, "improved", with_order=True)


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

"""Privacy cost of hyperparameter tuning: repeat a mechanism, release the best run.

Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential Privacy"
(ICLR 2022, arXiv:2110.03620): a mechanism Q (one training run) is run K
times, K random, and only the best output is released (⊥ when K = 0). If Q is
(λ, ε)-RDP and (λ̂, ε̂)-RDP, the tuned release A is (λ, ε')-RDP with

* K truncated negative binomial, shape η ≥ 0 and halting parameter γ
  (Theorem 2; η = 1 geometric, η = 0 logarithmic, Definition 1):

      ε' = ε + (1 + η)·(1 − 1/λ̂)·ε̂ + (1 + η)·log(1/γ)/λ̂ + log(E[K])/(λ − 1);

* K Poisson with mean μ (Theorem 6): if Q is also (ε̂, δ̂)-DP with
  e^ε̂ ≤ 1 + 1/(λ − 1),

      ε' = ε + μ·δ̂ + log(μ)/(λ − 1).

The distribution is named as dp_accounting's ``RepeatAndSelectDpEvent(event,
mean, shape)`` names it: ``mean`` = E[K]; ``shape`` = η, with ``shape = inf``
the Poisson distribution, ``shape = 1`` geometric, ``shape = 0`` logarithmic,
any other ``shape ≥ 0`` truncated negative binomial whose γ is the one that
gives this mean (solved here by bisection, rounded toward smaller γ, which only
increases log(1/γ) and so the bound).

The second order λ̂ (and, for Poisson, the order used to turn RDP into δ̂ at
ε̂ = log(1 + 1/(λ − 1)), the largest ε̂ the theorem allows) is free: the bound
holds for *every* λ̂ ≥ 1, so the minimum over any set of candidates — a grid,
a fine geometric grid, anything — is itself a valid bound. Three refinements,
all sound for the same reason, are applied on top of the theorems:

* λ̂ → 1 (TNB): (1 − 1/λ̂)·ε(λ̂) → 0 because RDP is non-decreasing in the
  order, so (1 + η)·log(1/γ) is always a candidate;
* monotonicity in λ: D_λ is non-decreasing in λ, so the bound at λ may be
  replaced by the smallest bound at any λ' ≥ λ (dp_accounting does this for the
  TNB case; here also for Poisson);
* :func:`repeat_and_select_event_rdp` evaluates the per-run RDP of an event
  at any real order and minimises over a fine grid of λ̂.

Why a curve known only on a grid cannot do better than the grid: the CGF
(λ − 1)·D_λ is convex with value 0 at λ = 1, so between two grid orders the
best certified bound on (λ̂ − 1)·ε(λ̂) is the chord a + b·λ̂, and the TNB
objective ((λ̂ − 1)·ε(λ̂) + log(1/γ))/λ̂ ≤ (a + log(1/γ))/λ̂ + b is monotone
on each segment: its minimum is at a grid order (or at λ̂ = 1).
:func:`repeat_and_select_rdp` therefore uses the grid and λ̂ = 1.

Means below 1 are rejected for every distribution (as dp_accounting does):
Theorem 6's bound is negative at ε = ε̂ = 0 when μ < 1, which no Rényi
divergence is, so it cannot be applied there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import roots
from jaxdp._src.solvers.tuning_kernel import (DEFAULT_LAMBDA_HATS, _check_orders, _distribution,
                                              _tuned_kernel)
from jaxdp._src.core import persist

__all__ = ["TunedEpsilon", "repeat_and_select_event_rdp", "epsilon", "sigma"]

# --------------------------------------------------------------------------
# Event level (host, float64): λ̂ on a fine grid
# --------------------------------------------------------------------------


def _union_grid(orders, lambda_hats):
  """Sorted union of targets and candidates, and the targets' positions."""
  hats = DEFAULT_LAMBDA_HATS if lambda_hats is None else _check_orders(lambda_hats,
                                                                        "lambda_hats")
  union = np.union1d(orders, hats)
  return union, np.searchsorted(union, orders)


# Configurations are evaluated in fixed-size chunks (a lone configuration as a
# batch of one), so a handful of programs serve every batch shape.
_CHUNK = 8


def _flat_event(event, count):
  """The event batch and ``count`` broadcast together and flattened."""
  leaves = [np.asarray(f, np.float64) for f in jax.tree_util.tree_leaves(event)]
  shape = np.broadcast_shapes(np.shape(count), *(np.shape(f) for f in leaves))
  flat = jax.tree_util.tree_map(
      lambda f: np.broadcast_to(np.asarray(f, np.float64), shape).reshape(-1), event)
  return flat, np.broadcast_to(np.asarray(count, np.float64), shape).reshape(-1), shape


def _take(event, idx):
  return jax.tree_util.tree_map(lambda f: f[idx], event)


def _run_rdp(event, count, grid):
  """count × event RDP on ``grid`` (float64) for a flat batch, shape (n, len(grid))."""
  from jaxdp._src.accounting import accountant as _acc  # pylint: disable=g-import-not-at-top
  per = np.asarray(_acc.event_rdp(event, grid, jnp.float64), np.float64)
  return np.where(count[:, None] == 0, 0.0, count[:, None] * per)  # 0 runs of inf: 0


def _check_event(event, count):
  from jaxdp._src import events as _events  # pylint: disable=g-import-not-at-top
  _events.validate(event)
  for f in jax.tree_util.tree_leaves(event):
    if not nx.is_concrete(f):
      raise ValueError("event parameters must be concrete (host-level function).")
  nx.check_array("count", count, low=0.0, integer=True)


def _event_tuned_on(event, count, targets, dist, lambda_hats):
  """(tuned curve, per-run curve) at the sorted ``targets``, float64 NumPy,
  shape ``batch + (len(targets),)`` (batch: event fields and ``count``)."""
  union, idx = _union_grid(targets, lambda_hats)
  flat, cnt, shape = _flat_event(event, count)
  n = cnt.size
  chunk = 1 if n <= 1 else _CHUNK
  tuned_out, run_out = [], []
  for start in range(0, n, chunk):
    sel = np.arange(start, start + chunk)
    sel = np.minimum(sel, n - 1)  # pad with the last configuration
    run = _run_rdp(_take(flat, sel), cnt[sel], union)
    t = _tuned_kernel(jnp.asarray(run), union, jnp.asarray(run), union, dist, True)
    m = min(chunk, n - start)
    tuned_out.append(np.asarray(t, np.float64)[:m, idx])
    run_out.append(run[:m, idx])
  tuned_c = np.concatenate(tuned_out).reshape(shape + (idx.size,))
  run_c = np.concatenate(run_out).reshape(shape + (idx.size,))
  return tuned_c, run_c


@nx.host_function
def repeat_and_select_event_rdp(event, orders, mean, shape, *, count=1, lambda_hats=None):
  """RDP of the best of K runs, each run ``count`` compositions of ``event``.

  The per-run RDP is ``count × jaxdp.accountant.event_rdp(event, ·)``,
  evaluated at the target orders *and* at a fine grid of second orders λ̂
  (default :data:`DEFAULT_LAMBDA_HATS`): Theorem 2 is minimised over all of
  them (and λ̂ → 1), Theorem 6's δ̂ is converted over all of them, and the
  bound at λ is replaced by the smallest bound at any grid order ≥ λ. Each
  candidate gives a valid bound, so the minimum does too; a finer
  ``lambda_hats`` can only lower the answer.

  An event whose fields are arrays is a batch of independent configurations
  (one tuned curve each), not a composition.

  Args:
    event: a :mod:`jaxdp.events` event with concrete parameters.
    orders: 1-D target orders > 1.
    mean, shape: the run-count distribution (see :func:`repeat_and_select_rdp`).
    count: compositions of ``event`` per run (whole number ≥ 0), broadcast
      against the event batch.
    lambda_hats: candidate second orders > 1 (default
      :data:`DEFAULT_LAMBDA_HATS`).

  Returns:
    float64 NumPy array of shape batch + (len(orders),).

  Raises:
    ValueError: naming the bad argument (``mean``, ``shape``, ``orders``,
      ``count``, ``lambda_hats`` or an event field).
  """
  dist = _distribution(mean, shape)
  orders = _check_orders(orders)
  _check_event(event, count)
  perm = np.argsort(orders, kind="stable")
  inv = np.argsort(perm, kind="stable")
  out, _ = _event_tuned_on(event, count, orders[perm], dist, lambda_hats)
  return out[..., inv]


class TunedEpsilon(NamedTuple):
  """ε of the tuned release and of one run (float64 NumPy)."""
  tuned: np.ndarray
  one_run: np.ndarray


@persist.jit
def _to_epsilon_jit(rdp, orders, delta):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  return _rdp.to_epsilon(rdp, orders, delta)[0]


def _epsilons(event, count, delta, dist, orders, lambda_hats):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  if orders is None:
    targets = DEFAULT_LAMBDA_HATS if lambda_hats is None else np.union1d(
        _rdp.DEFAULT_ORDERS, _check_orders(lambda_hats, "lambda_hats"))
  else:
    targets = np.unique(_check_orders(orders))
  tuned_c, run_c = _event_tuned_on(event, count, targets, dist, lambda_hats)
  eps_t = _to_epsilon_jit(tuned_c, targets, delta)
  eps_1 = _to_epsilon_jit(run_c, targets, delta)
  eps_t, eps_1 = np.asarray(eps_t, np.float64), np.asarray(eps_1, np.float64)
  # The tuned curve dominates the per-run one pointwise; keep that visible
  # through the conversion's rounding too.
  return np.maximum(eps_t, eps_1), eps_1


def epsilon(event, count, delta, mean, shape, orders=None, *, lambda_hats=None) -> TunedEpsilon:
  """(ε, δ)-DP of the tuned release, and of one run.

  One run is ``count`` compositions of ``event`` (per-run RDP = count ×
  ``jaxdp.accountant.event_rdp``). The tuned RDP curve is
  :func:`repeat_and_select_event_rdp`'s, converted with
  :func:`jaxdp.rdp.to_epsilon` (improved conversion, Balle et al. 2020
  Prop 12) over the target orders: ``orders`` if given, else
  :data:`jaxdp.rdp.DEFAULT_ORDERS` together with the λ̂ grid. The one-run ε
  uses the same orders.

  Args:
    event: a :mod:`jaxdp.events` event (concrete; array fields = a batch).
    count: compositions per run (whole number ≥ 0).
    delta: δ in (0, 1).
    mean, shape: the run-count distribution (see :func:`repeat_and_select_rdp`).
    orders: target orders (> 1), optional.
    lambda_hats: candidate second orders, optional.

  Returns:
    ``TunedEpsilon(tuned, one_run)``, float64 NumPy (0-d → ``numpy.float64``),
    the broadcast shape of the event batch, ``count`` and ``delta``;
    ``tuned >= one_run``.

  Raises:
    ValueError: naming the bad argument.
  """
  dist = _distribution(mean, shape)
  _check_event(event, count)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  with nx.x64():
    t, o = _epsilons(event, count, delta, dist, orders, lambda_hats)
    return TunedEpsilon(*nx.to_host((t, o)))


def sigma(target_epsilon, delta, q, steps, mean, shape, *, rtol: float = 1e-6, orders=None,
          lambda_hats=None):
  """Per-run noise multiplier σ so that the tuned release meets the target.

  Each run is ``steps`` steps of the Poisson-sampled Gaussian at rate ``q``
  (``jaxdp.events.SampledGaussian(q, σ)``); K runs (``mean``, ``shape``) and
  the best released. Bisection in log σ over
  :data:`jaxdp.calibrate.SIGMA_RANGE` for whole arrays of configurations (the
  tuned ε is non-increasing in σ: every term of Theorems 2 and 6 is
  non-decreasing in the per-run RDP). Guarantees, for a finite answer σ:
  ``epsilon(SampledGaussian(q, σ), steps, delta, mean, shape, ...).tuned ≤
  target`` (checked by that function) and σ·(1 − rtol) misses it, unless σ is
  the lower end of the range. q = 0 or steps = 0: the runs do not look at
  the data, nor does the release → 0. Unreachable targets → ``inf``.

  Args:
    target_epsilon: ε budget(s) > 0 for the tuned release.
    delta: δ in (0, 1).
    q: sampling rate(s) in [0, 1].
    steps: steps per run (whole numbers ≥ 0).
    mean, shape: the run-count distribution (see :func:`repeat_and_select_rdp`).
    rtol: relative tolerance on σ, in (0, 0.1].
    orders, lambda_hats: as for :func:`epsilon`.

  Returns:
    σ as float64 NumPy (0-d → ``numpy.float64``), the broadcast shape.

  Raises:
    ValueError: naming the bad argument.
  """
  from jaxdp._src.solvers import calibrate as _cal  # pylint: disable=g-import-not-at-top
  from jaxdp._src import events as _events  # pylint: disable=g-import-not-at-top
  dist = _distribution(mean, shape)
  nx.check_array("target_epsilon", target_epsilon, low=0.0, low_open=True)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("steps", steps, low=0.0, integer=True)
  nx.check_array("rtol", rtol, low=0.0, high=0.1, low_open=True)
  out_shape = nx.check_same_shape(target_epsilon=target_epsilon, delta=delta, q=q, steps=steps)
  flat = [np.broadcast_to(np.asarray(a, np.float64), out_shape).reshape(-1)
          for a in (target_epsilon, delta, q, steps)]
  t, d, qq, tt = flat
  out = np.zeros(t.shape)
  live = np.nonzero((qq > 0) & (tt > 0))[0]
  if live.size:
    t, d, qq, tt = t[live], d[live], qq[live], tt[live]

    def eps_at(s):
      with nx.x64():
        e, _ = _epsilons(_events.SampledGaussian(qq, s), tt, d, dist, orders, lambda_hats)
      return e

    # Bisection in ratio (√(lo·hi)), every configuration each round (one shape).
    r = roots.bisect(lambda s, idx: eps_at(s) <= t, _cal.SIGMA_RANGE[0], _cal.SIGMA_RANGE[1],
                     tol=math.log1p(rtol), certified="upper", split="geometric", batch="all",
                     size=t.size)
    ok_hi, ans = r.feasible, np.where(r.feasible, r.x, _cal.SIGMA_RANGE[1])
    # Final check by the public function's own computation.
    ans, _ = roots.step_up(lambda s: ~(eps_at(s) > t), ans, 1.0 + rtol, 8, active=ok_hi)
    ans = np.where(ok_hi, ans, np.inf)
    out[live] = ans
  return nx.to_host(out.reshape(out_shape))

"""Tight composition via privacy-loss distributions (PLDs) composed by FFT.

The mechanism is the Poisson-subsampled Gaussian with add/remove neighbours
(L2 sensitivity 1, noise multiplier ``sigma``, sampling rate ``q``).  Its two
dominating directions are

* remove: P = (1-q) N(0, σ²) + q N(1, σ²)   vs   Q = N(0, σ²), and
* add:    P = N(0, σ²)                        vs   Q = (1-q) N(0, σ²) + q N(1, σ²).

In both the privacy loss ``L(x) = log P(x)/Q(x)`` is monotone in the output x,
so every loss bucket (ε_i, ε_{i+1}] is an interval of x whose P and Q masses are
differences of Gaussian CDFs.  The hockey-stick divergence of the T-fold
composition is (Balle, Barthe & Gaboardi 2018, Thm 1 / privacy profiles;
Koskela et al. 2020 for the FFT)

  δ_T(ε) = Σ_{ℓ > ε} p_T(ℓ) (1 - e^{ε-ℓ}) + p_T(∞),

where p_T is the T-fold convolution of the one-step P-distribution of the loss.
The answer is the maximum over the two directions.

Discretisation (uniform loss grid ε_i = i·h)
--------------------------------------------
*Pessimistic* (upper bound on δ).  Losses are moved UP onto the grid: the mass
of each bucket B_i = (ε_i, ε_{i+1}] is split between its two end points so that
both its P-mass and its Q-mass are preserved ("connect the dots", Doroshenko,
Ghazi, Kamath, Kumar & Manurangsi, PETS 2022):

  to ε_i:     α_i = (e^{ε_{i+1}} Q(B_i) - P(B_i)) / (e^h - 1),
  to ε_{i+1}: β_i = P(B_i) - α_i.

Splitting an atom is the inverse of a post-processing, so the split pair
dominates the mechanism (its profile is the chord interpolation of the true
profile in e^ε, which lies above the convex true profile); the error is
second order in h, instead of the first-order shift of plain rounding up.  Mass
below the grid is rounded up to the lowest grid point and mass above the grid
(a per-step tail of at most ``τ/B`` <= ``τ/T``, τ the truncation budget below,
B = T rounded up to a power of 256, so that configurations differing in T
alone share their one-step PMFs) goes to the infinity atom.

*Optimistic* (certified lower bound on δ).  A valid pair Z on the same nodes
whose privacy profile D(u) (u = e^ε) lies below the true profile δ(u) for
EVERY u >= 0 (ε of either sign).  By Blackwell's theorem for dichotomies
(Dong, Roth & Su, JRSS-B 2022, Thm 2.10: pointwise-ordered trade-off
functions, equivalently hockey-stick profiles, imply a post-processing) Z is
a post-processing of the mechanism, hence Z^T is one of the T-fold
composition and δ_{Z^T}(ε) <= δ_T(ε) for all ε.  Z is built from its
profile: D is piecewise linear in u with kinks only at the nodes u_j,
D(0) = 1, D = 0 beyond the top node, D convex, max(0, 1-u) <= D <= δ.  Its
node values are D_j = δ(u_j) - E_j with slacks E_j >= 0 chosen so that

* (C1) the chord of D on each bucket stays below δ: with the tangent gaps
  a_j = δ(u_{j+1}) - T_j(u_{j+1}) = e^{ε_{j+1}} Q(B_j) - P(B_j) and
  b_j = δ(u_j) - T_{j+1}(u_j) = P(B_j) - e^{ε_j} Q(B_j) (T_j the tangent of δ
  at u_j, slope -Q(L > ε_j)), the worst case over all convex δ with these
  end slopes and chord is covered when E_j/b_j + E_{j+1}/a_j >= 1; we require
  E_j >= θ_j b_j and E_{j+1} >= (1 - θ_j) a_j, θ_j = a_j/(a_j+b_j) where
  possible, otherwise moved so the neighbours can absorb the burden;
* (C2) every chord slope stays inside its bucket's slope range
  [Q(L > ε_{j+1}), Q(L > ε_j)], i.e. -b_j <= E_{j+1} - E_j <= a_j, which makes
  D convex (all node masses >= 0); enforced by max-plus envelopes;
* (caps) E_j <= min(δ(u_j), δ(u_j) - (1 - u_j)), with E_0 and E_top fixed
  by D(0) = 1 and D(u_top) = 0.

The node P-masses are e^{ε_j} times the slope jumps of D; they are the
connect-the-dots masses α_j + β_{j-1} plus a local correction from the
second differences of E, and sum to 1.  The slacks are of the order of the
tangent gaps, so the error is second order in h like the pessimistic one
(measured interval widths ~5e-4 relative in ε at the default rtol).  Where
the slack problem is infeasible (grids much coarser than the loss spread)
a flagged fallback rounds every bucket's P-mass down to its lower node
(first order; certified by stochastic dominance, since
(1 - e^{ε-ℓ})_+ is non-decreasing in ℓ).  The optimistic δ has no infinity
atom (the Poisson-sampled Gaussian has none in either direction).

Composition
-----------
One real FFT of length N, the spectrum raised to the power T by binary
exponentiation (complex products only: no logarithm of a possibly vanishing
spectrum), one inverse.  Heterogeneous phases multiply their spectra.  The FFT
is cyclic, so each composed distribution is computed on a window
[a, a + N) of loss indices chosen by Chernoff bounds on its one-step PMF (as
in dp_accounting, with our own orders; the pessimistic and the optimistic
PMF each in its own window): the mass of the composed pessimistic
distribution above its window is at most τ per phase and is added to the
infinity atom in the pessimistic result; mass below the window wraps to its
top (which can only increase the pessimistic δ).  Composed infinity mass is
``1 - (1 - p_∞)^T``.  For the optimistic δ, mass wrapped from below its
window to its top (at most τ per phase by the Chernoff bound on the
optimistic PMF) is subtracted from δ, and mass wrapped from above to the
bottom only lowers it.  So only those two edges need a certificate; the
other two are Chernoff edges too, for accuracy only, each with a margin of
``_EDGE_PAD`` grid points.  N is the smallest power of two >= the window
(:mod:`jaxdp._src.pld.run`).  The pessimistic window depends on the pessimistic
PMF alone, so the upper bound alone (``guarded_bounds(want_lower=False)``,
the PLD calibration's rounds) is bit for bit the full evaluation's.  The
read-out sums only the nodes up to the window's top and from loss 0 (ε
queries) or the smallest queried ε (:mod:`jaxdp._src.pld.readout`).

The truncation budget τ is ``1e-17`` for δ queries and ``1e-4`` of the
smallest target δ of the configuration (per phase; never below ``1e-17``)
for ε queries (:func:`jaxdp._src.pld.run._tail_budget`): what it moves to the
infinity atom costs the answer at most that fraction of δ (measured: the
upper ε +5e-6 to +1.8e-5 relative on DP-SGD configurations), while the rare
large losses of small-q configurations no longer set the window (one-step
grids 2.3x and most composition windows 2x shorter on the benchmark batch).

Implementation: the distinct one-step grids of all configurations, phases and
both directions are packed back to back into blocks of ``_BLK`` nodes (no
padding to the longest grid), processed in calls of 2**17 nodes; per-grid sums
and min-plus scans run blockwise with restarts at grid boundaries
(:class:`_Rows`).  ε(δ) is read on the host in two passes, block values and
then the crossing block's nodes (:func:`jaxdp._src.pld.readout.epsilon_on_windows`).

Grid size (``value_discretization_interval=None``)
----------------------------------------------------
Splitting a bucket's mass between its end points inflates the per-step loss
variance by at most ~h²/4, against a true per-step variance of about
``v = q² (e^{1/σ²} - 1)`` (the χ² divergence); the relative ε error is then
roughly ``0.1 h² / v`` independent of T (measured on DP-SGD configurations).
We take ``h = clip(sqrt(2 · rtol · v), 1e-6, 1e-2)``, enlarge it when one step
would need more than 2**22 grid points or the composed window more than 2**21,
and finally shrink it so that -log(1-q) is a grid point; see
:func:`grid_interval`.  With the default ``rtol = 1e-3`` the upper bound agrees
with dp_accounting's PLD accountant to ~1e-4 relative.

Round-off: bucket masses come from tail-aware Gaussian CDF differences
(absolute error ~1e-16 of the tail, not of 1). The composition returns, per
window, a proven bound on every composed entry's round-off
(:func:`jaxdp._src.pld.compose._compose_group`; the proof, under one stated and
tested assumption on the FFT library's twiddle accuracy, is in
docs/mathematics.md, "Round-off of the fast kernel"); δ(ε) carries the bound
of the nodes above ε, the ones its sum reads
(:func:`jaxdp._src.pld.readout.answer`): added to the pessimistic δ, subtracted
from the optimistic one.  Where that bound moves an upper answer by more
than 1e-4 relative (small δ after many steps), the configuration is
composed again with its one-step PMFs exponentially tilted towards the
query (:mod:`jaxdp._src.pld.tilt`), which makes the bound relative to the δ
read instead of uniform; the answer is the intersection of both intervals.
The optimistic slacks carry a 1e-6 relative margin against the round-off in
the tangent gaps where the caps allow.

Code layout: :mod:`jaxdp._src.pld.step` holds the one-step discretisation (loss
geometry, pessimistic/optimistic buckets, Chernoff window edges; the packed
block layout in :mod:`jaxdp._src.pld.step_layout`), :mod:`jaxdp._src.pld.compose` the FFT composition (XLA),
:mod:`jaxdp._src.pld.readout` the δ/ε queries on the composed windows (NumPy on
the host: nothing to compile per window length), :mod:`jaxdp._src.pld.tilt` the
tilted second pass, :mod:`jaxdp._src.pld.run` the
host pipeline that runs them within the memory caps; this module chooses
grids, validates inputs, guards the answers and holds the public entry
points.
"""

from __future__ import annotations

import numpy as np

from jaxdp._src.kernels import rdp_driver as _rdp_driver
from jaxdp._src.core import numerics as num
from jaxdp._src.pld import fallback as _pld_fallback
from jaxdp._src.pld.kernel_guards import _guard, _one_step_values

__all__ = [
    "delta",
    "epsilon",
    "grid_interval",
]

from jaxdp._src.pld.step import (  # noqa: F401  (re-exported for tests and tools)
    _EDGE_PAD, _MAX_AUTO_H, _MAX_ELEMS, _MAX_FFT, _MAX_STEP_GRID,
    _MAX_WINDOW, _SQRT_HALF, _TAIL, _chernoff_edges, _edges, _grid_range,
    _grid_steps, _loss_of_x, _one_step, _optimistic, _single_step, _stage1,
    _x_of_loss)
from jaxdp._src.pld.step_layout import (  # noqa: F401  (re-exported for tests and tools)
    _BLK, _CHUNK_BLOCKS, _Rows, _chunks, _pack, _pow2)
from jaxdp._src.pld.compose import _compose_group  # noqa: F401
from jaxdp._src.pld.run import _fft_size, _run_within_memory  # noqa: F401

# --------------------------------------------------------------------------
# grids, validation and entry points (the pipeline: jaxdp._src.pld.run)
# --------------------------------------------------------------------------


def _loss_variance(q, sigma):
  """One-step loss variance proxy v = q² (e^{1/σ²} - 1) (χ² divergence)."""
  with np.errstate(over="ignore"):
    return np.minimum(q ** 2 * np.expm1(np.minimum(1.0 / sigma ** 2, 700.0)), 1e300)


def grid_interval(q, sigma, steps, rtol=1e-3):
  """Automatic loss-grid interval h for (q, σ, T) and a target relative accuracy.

  ``h = clip(sqrt(2 rtol v), 1e-6, 1e-2)`` with ``v = q² (e^{1/σ²} - 1)`` the
  one-step loss variance (relative ε error ≈ 0.1 h²/v, independent of T),
  enlarged when one step would need more than 2**22 grid points or the
  composed window more than 2**21, then aligned so that -log(1-q) is a grid
  point (module docstring).

  Args:
    q, sigma, steps: broadcastable arrays (host values).
    rtol: target relative width of the certified ε interval.
  Returns:
    NumPy float64 array of h (broadcast shape).
  """
  q, sigma, steps = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (q, sigma, steps)))
  v = _loss_variance(q, sigma)
  t = np.maximum(steps, 1.0)
  h = np.clip(np.sqrt(2.0 * rtol * v), 1e-6, _MAX_AUTO_H)
  # Size caps: one-step span and composed window (memory floor on h).  The
  # window's spread uses the loss variance bounded by q·span² (at small σ the
  # χ² proxy v is astronomically larger than the spread of the loss); the
  # real window comes from Chernoff edges and is capped at run time.
  i_lo, i_hi = _grid_range(q, sigma, t, 1.0, True)
  span = (i_hi - i_lo).astype(np.float64)
  s = np.sqrt(t * np.minimum(v, np.maximum(q, 1e-300) * span ** 2))
  window = np.minimum(40.0 * s + 2.0 * span, t * span)
  h_min = np.maximum(span / _MAX_STEP_GRID, window / _MAX_WINDOW)
  h = np.maximum(h, h_min)
  # Align the grid with the largest add-direction loss -log(1-q), where that
  # direction's loss mass piles up (keeps the optimistic end tight): h = top/k
  # for a whole k, but never below the memory floor h_min (when top < h_min
  # the grid is left unaligned; aligning it there once shrank h to -log(1-q)
  # and asked for grids of 10^8 points).
  with np.errstate(divide="ignore"):
    top = -np.log1p(-q)
  ok = np.isfinite(top) & (top > 0)
  top_ = np.where(ok, top, 1.0)
  k = np.minimum(np.ceil(top_ / h), np.floor(top_ / h_min))
  return np.where(ok & (k >= 1), top_ / np.maximum(k, 1.0), h)


def _prepare(q, sigma, steps, value, value_name, value_kw, value_discretization_interval, rtol):
  num.check_array("q", q, low=0.0, high=1.0)
  num.check_array("sigma", sigma, low=0.0, low_open=True)
  num.check_array("steps", steps, low=0.0, integer=True)
  num.check_array(value_name, value, **value_kw)
  if value_discretization_interval is not None:
    num.check_array("value_discretization_interval", value_discretization_interval,
                    low=0.0, low_open=True)
  # (0, 0.1] as in jaxdp.pld_general, whose engine answers where this one's
  # interval is wide (rtol 0.3 passed here and then failed inside it).
  num.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  shape = num.check_same_shape(q=q, sigma=sigma, steps=steps, **{value_name: value})
  arrs = [np.broadcast_to(np.asarray(x, np.float64), shape).ravel()
          for x in (q, sigma, steps, value)]
  q_, s_, t_, v_ = arrs
  t_ = np.round(t_)
  trivial = (q_ == 0) | (t_ == 0)
  keys = np.stack([q_, s_, t_], axis=1)
  cfg, inverse = np.unique(keys[~trivial], axis=0, return_inverse=True)
  inverse = inverse.reshape(-1)
  counts = np.bincount(inverse, minlength=len(cfg)) if len(cfg) else np.zeros(0, int)
  kmax = int(counts.max()) if len(cfg) else 0
  table = np.zeros((len(cfg), max(kmax, 1)))
  slot = np.zeros(len(inverse), dtype=np.int64)
  fill = np.zeros(len(cfg), dtype=np.int64)
  vals = v_[~trivial]
  for i, c in enumerate(inverse):
    slot[i] = fill[c]
    table[c, fill[c]] = vals[i]
    fill[c] += 1
  for c in range(len(cfg)):  # pad with a repeated valid query
    table[c, fill[c]:] = table[c, 0]
  if value_discretization_interval is None:
    h = grid_interval(cfg[:, 0], cfg[:, 1], cfg[:, 2], rtol) if len(cfg) else np.zeros(0)
  else:
    h = np.broadcast_to(np.asarray(value_discretization_interval, np.float64), shape).ravel()
    h = np.array([h[~trivial][np.nonzero(inverse == c)[0][0]] for c in range(len(cfg))])
  return shape, trivial, cfg, inverse, slot, table, h


def _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon, automatic,
                    want_lower=True, while_waiting=None):
  """(upper, lower) for every query: 0 where trivial, else from the composed PLDs
  (lower -inf there without ``want_lower``); ``while_waiting``: host work
  to run while XLA builds the one-step PMFs."""
  up = np.zeros(trivial.shape)
  lo = np.zeros(trivial.shape)
  if len(cfg):
    u, l = _run_within_memory(cfg[:, 0], cfg[:, 1], cfg[:, 2], h, table,
                              want_epsilon=want_epsilon, automatic=automatic,
                              want_lower=want_lower, while_waiting=while_waiting)
    up[~trivial] = u[inverse, slot]
    lo[~trivial] = l[inverse, slot]
  return up, lo


@num.host_function
def delta(q, sigma, steps, epsilon, *, value_discretization_interval=None, rtol=1e-3,
          return_bounds=False):
  """δ(ε) of ``steps`` compositions of the Poisson-subsampled Gaussian (PLD, FFT).

  Batched over broadcast arrays of configurations: configurations sharing
  (q, σ, T) share one composed PLD; configurations are grouped by grid size
  and each group runs through vmapped, jitted kernels.

  Args:
    q: sampling rate in [0, 1], or a :mod:`jaxdp.sampling` sampler (then
      ``steps`` are its training steps and the interval is its own, see
      :func:`jaxdp._src.accounting.sampler_forward.pld_bounds`; ``ValueError`` naming the
      sampler where it has no tight path, e.g. balls-in-bins).
    sigma: noise multiplier (> 0), L2 sensitivity 1.
    steps: number of compositions T (whole number >= 0).
    epsilon: ε >= 0 (may be +inf).
    value_discretization_interval: loss grid h; None picks it from
      :func:`grid_interval`.
    rtol: target relative accuracy used when h is picked automatically, in
      (0, 0.1].
    return_bounds: also return the certified lower bound.

  Returns:
    The best certified upper bound on δ(ε) (max over add/remove): the
    minimum of the kernel's pessimistic bound, the general engine's where
    the kernel's interval is over 10% wide (up to 4 configurations per
    call) and the RDP bound (:mod:`jaxdp._src.pld.fallback`), the very number
    :func:`jaxdp.delta` with ``accountant="pld"`` returns; or
    ``(lower, upper)`` with ``return_bounds=True`` (lower: the largest
    certified lower bound).

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  lo, up, _ = guarded_bounds("delta", q, sigma, steps, epsilon,
                             value_discretization_interval, rtol, best=True, rdp_value=False)
  return (lo, up) if return_bounds else up


@num.host_function
def epsilon(q, sigma, steps, delta, *, value_discretization_interval=None, rtol=1e-3,
            return_bounds=False):
  """ε(δ) of ``steps`` compositions of the Poisson-subsampled Gaussian (PLD, FFT).

  The returned ε is the smallest ε at which the pessimistic PLD's δ(ε) is
  <= ``delta`` (solved exactly on the piecewise-exponential δ of the discrete
  PLD, then nudged up by a few ulps), so δ(ε) <= delta holds for the mechanism.
  +inf when the infinity mass alone exceeds ``delta``. Where the kernel's
  FFT round-off allowance is comparable to ``delta`` (extreme inputs: its
  upper ε is +∞, or its certified interval is over 10% wide), the general
  engine's interval is intersected in (:mod:`jaxdp._src.pld.fallback`, up to 4
  configurations per call, the widest first, seconds each), and the upper
  end is never above the RDP bound (every call): the answer is the best
  certified one, the very number :func:`jaxdp.epsilon` with
  ``accountant="pld"`` and ``jaxdp.accountant.pld()`` return.

  Args:
    q, sigma, steps: as in :func:`delta`.
    delta: target δ in (0, 1].
    value_discretization_interval, rtol: as in :func:`delta`.
    return_bounds: also return the certified optimistic lower bound.

  Returns:
    The upper bound on ε, or ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  lo, up, _ = guarded_bounds("epsilon", q, sigma, steps, delta,
                             value_discretization_interval, rtol, best=True, rdp_value=False)
  return (lo, up) if return_bounds else up


def guarded_bounds(name, q, sigma, steps, value, value_discretization_interval=None,
                   rtol=1e-3, finite_fallback=False, full_rdp=True, want_lower=True,
                   best=False, rdp_value=True):
  """The guarded PLD interval of :func:`epsilon` (name "epsilon", value = δ)
  or :func:`delta` (name "delta", value = ε), and the RDP upper bound the
  guards compared it with (host level: call under float64).

  With ``finite_fallback``, an interval that is +∞ or wide is intersected
  with the general engine's (:mod:`jaxdp._src.pld.fallback`).  With
  ``full_rdp=False`` (the PLD calibration rounds) the RDP bound is the cheap
  one of :func:`_rdp_ceiling` wherever that suffices.

  Without ``want_lower`` (the PLD calibration's rounds, which read the upper
  end alone) the optimistic PMFs are neither built nor composed, ~1/3 of
  the work: ``upper`` is bit for bit the full evaluation's (module
  docstring), checked against the one-step value and the RDP bound, and
  ``lower`` is the one-step value. Not with ``finite_fallback`` (which needs
  the interval's width).

  With ``best`` (the public answer of :func:`epsilon`, :func:`delta`,
  ``jaxdp.epsilon/delta(accountant="pld")`` and ``jaxdp.accountant.pld()``):
  the general engine's interval is intersected in where the kernel's is +∞
  or wide, for ε and δ alike, the RDP bound is the full default-orders
  value, and ``upper`` is already min(PLD upper, RDP upper)
  (:mod:`jaxdp._src.pld.fallback`).

  Without ``rdp_value`` (callers that read the interval alone) the full RDP
  value is computed only where it may be below the PLD upper end: where a
  cheap lower bound on it (:func:`jaxdp._src.kernels.host_rdp.epsilon_lower_bound`,
  for ε also a positive certified lower end; :func:`~jaxdp._src.kernels.host_rdp.delta_lower_bound`)
  is at least the upper end, min(upper, RDP) is the upper end whatever the
  full value, and ``rdp_upper`` there is the cheap ceiling (an RDP upper
  bound, not the default-path value).

  Returns:
    ``(lower, upper, rdp_upper)`` NumPy arrays of the broadcast shape.
  """
  if best:
    finite_fallback, full_rdp, want_lower = True, True, True
  if finite_fallback and not want_lower:
    raise ValueError("finite_fallback needs the lower bound (want_lower=True)")
  if name == "epsilon":
    checks = dict(low=0.0, high=1.0, low_open=True)
    clip = lambda x: np.maximum(x, 0.0)
  else:
    checks = dict(low=0.0, allow_inf=True)
    clip = lambda x: np.clip(x, 0.0, 1.0)
  value_name = "delta" if name == "epsilon" else "epsilon"
  shape, trivial, cfg, inverse, slot, table, h = _prepare(
      q, sigma, steps, value, value_name, checks, value_discretization_interval, rtol)
  one_step = []

  def while_waiting():   # the guards' one-step values, on the host while XLA runs
    one_step.append(_one_step_values(name, q, sigma, value, shape))

  up, lo = _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon=name == "epsilon",
                           automatic=value_discretization_interval is None,
                           want_lower=want_lower, while_waiting=while_waiting)
  up = clip(up).reshape(shape)
  if finite_fallback and (name == "epsilon" or best):   # +∞ or wide at extreme inputs
    lo, up = _pld_fallback.intersect_general(
        name, *(np.broadcast_to(np.asarray(a, np.float64), shape)
                for a in (q, sigma, steps, value)),
        lo.reshape(shape), up, rtol)
    up = clip(up)
  if name == "delta":
    up = _rdp_driver.delta_floor(up, q, steps, value)
  lo, up, rdp_up = _guard(name, clip(lo).reshape(shape), up, q, sigma, steps, value, shape,
                          full_rdp, one=one_step[0] if one_step else None,
                          skip_full=full_rdp and not rdp_value)
  if best:   # never above the RDP answer (both are certified upper bounds)
    lo, up = _pld_fallback.combine(lo, up, None, rdp_up)
  return lo, up, rdp_up



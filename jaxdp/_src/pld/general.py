"""General PLD engine: heterogeneous composition of dominating pairs, certified bounds.

``phases`` is a sequence of ``(Mechanism, count)`` (:mod:`jaxdp.pairs`). Add/remove
neighbours keep one direction for every step, so all ``remove`` pairs are
composed together and all ``add`` pairs together, and the answer is the worse of
the two (one direction only when every mechanism has ``remove is add``). The
hockey-stick divergence of a composition is read off the composed privacy-loss
distribution (PLD) ω of the pair (Zhu, Dong & Wang, AISTATS 2022, Thm 10;
Koskela, Jälkö & Honkela 2020 for the FFT):

    δ(ε) = Σ_{ℓ > ε} ω(ℓ) (1 - e^{ε-ℓ}) + ω(+∞).

Bounds. Each pair is discretised on the grid ℓ = k·h twice (:func:`jaxdp.pairs.discretize`):
a pessimistic PMF whose composed δ is >= the true δ for every ε and an optimistic one
whose composed δ is <= it. Both stay bounds through composition because δ_T is
monotone in every mass and, per coordinate, convex and non-increasing in u = e^{-ℓ}.
The returned upper bound uses the pessimistic side, ``return_bounds=True`` also
returns the optimistic one. Losses are assumed accurate to the pairs' ``tau``; the
composed loss is shifted by Σ count·tau in the safe direction.

Composition (:mod:`jaxdp._src.pld.general_compose`). Each phase's ``count``-fold power by repeated squaring (about
2·log2(count) linear convolutions by real FFT in float64), then the phases are
convolved together. After every convolution the result is cut to a window from
Chernoff bounds, P(S > a) <= E[e^{λS}] e^{-λa} (and the lower tail alike), with
the log-MGF of the partial product (Σ count·log M_j(λ) over the phases it
contains, each one-step M_j bounded from a 4096-block summary of the
pessimistic PMF): the pessimistic side drops both cut tails and books their
certified mass κ each at +∞ (a dropped unit of mass adds at most one unit to
any later δ); the optimistic side drops both (dropping mass only lowers δ).
κ = ``_KAPPA`` (or 1e-6·min δ when smaller) divided by the number of cuts.

Round-off. The PMFs are exponentially tilted, w_ℓ e^{λℓ} scaled to max 1, with
the λ >= 0 of the Chernoff bound at the query (tilting commutes with
convolution). Negative FFT outputs are clipped to 0 (that only moves entries
toward the exact non-negative values). Each convolution of a, b by FFTs of
length n adds an L1 error (in tilted units) of at most
2√n [L η (‖a‖₂‖b‖₁ + ‖a‖₁‖b‖₂ + ‖a*b‖₂) + 3u ‖a‖₁‖b‖₂], L = log₂ n, η = 4u
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., Thm 24.2,
with the unnormalised DFT's ‖Fx‖₂ = √n‖x‖₂); errors of the inputs propagate
with the other factor's mass. A tilted L1 error E is worth at most
E·e^{logc - λε} of δ at ε (only losses above ε count): relative to δ near the
query, which the pessimistic δ adds and the optimistic δ subtracts. Suffix
sums carry a relative (n + 4)·2u margin.

ε from δ (:mod:`jaxdp._src.pld.general_readout`): the smallest ε >= 0 with δ_upper(ε) <= δ, solved exactly on each grid
interval from discounted suffix sums D_i = Σ_{m>=i} ω_m e^{-(ℓ_m - ℓ_i)} (no
e^{+ℓ}, no overflow; the allowance taken at the interval's left end); +∞ where
the +∞ mass and the allowance alone reach δ. The lower bound is the last ε
whose optimistic δ still exceeds the target.

Grid interval (``value_discretization_interval=None``). Both discretisations are
second order: a bucket's split or merge changes the per-step loss variance by
O(h²), against the per-step variance v of the loss, so the relative error of ε is
about c·h²·T/V with V = Σ count·v (the composed variance). We take
h = sqrt(rtol·V / (2 Σ count)) (v measured on a trial discretisation), clipped to
[1e-7, 0.05]: the optimistic side needs half the interval of the pessimistic
one (a steep edge of the loss law, e.g. the add direction of a subsampled
mechanism near -log(1-q), has no mass above to borrow from). h is then shrunk
(at most 2x) so that the smallest top loss of the pairs (an atom or a pile-up:
ε0 of pure DP, 1/b of Laplace, -log(1-q) of the add direction of subsampling)
is a grid point. The measured upper - lower gap is below rtol·ε/2 on DP-SGD
configurations (q 1e-3..0.1, σ 0.5..5, T up to 1e5; tests/pld/test_pld_general.py).
When a one-step grid would exceed 2^22 cells or the composed window 2^22
points, an automatic h grows by the overshoot (:func:`_coarser`; a trial on a
16x coarser grid predicts a large overshoot before the fine grid is built,
:func:`_first_attempt`), up to ``_H_AUTO_LIMIT`` = 1, beyond which
:class:`GridTooLarge`, a ``ValueError`` naming ``phases``, says that this
engine cannot answer: callers fall back to a certified bound; a user-given h
raises ``ValueError`` naming ``value_discretization_interval``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from jaxdp._src.kernels import guards as _guards
from jaxdp._src.core import numerics as nx
from jaxdp._src.mechanisms import discretise as _pairs_discretise
from jaxdp._src.mechanisms import pairs as _pairs
from jaxdp._src.pld import general_compose as _general_compose
from jaxdp._src.pld.general_compose import TooLarge, compose
from jaxdp._src.pld.general_readout import delta_of, epsilon_of

__all__ = ["epsilon", "delta", "grid_interval", "loss_variance", "GridTooLarge"]

_KAPPA = 1e-22           # total Chernoff-certified tail mass sent to +inf
_H_MIN, _H_MAX = 1e-7, 0.05

def _validate(phases):
  try:
    items = list(phases)
  except TypeError:
    raise ValueError(f"phases must be a sequence of (Mechanism, count); found {phases!r}.") from None
  out = []
  for i, item in enumerate(items):
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], _pairs.Mechanism)):
      raise ValueError(f"phases[{i}] must be a (Mechanism, count) tuple; found {item!r}.")
    mech, count = item
    nx.check_array(f"phases[{i}] count", count, low=0.0, integer=True)
    _pairs.validate_pair(mech.remove, f"phases[{i}].remove")
    if mech.add is not mech.remove:
      _pairs.validate_pair(mech.add, f"phases[{i}].add")
    if int(count) > 0:
      out.append((mech, int(count)))
  return out


# --------------------------------------------------------------------------
# discretisation and grid choice
# --------------------------------------------------------------------------


class GridTooLarge(ValueError):
  """The automatic grid cannot represent the composition within the memory
  budget, even at the coarsest interval (:data:`_H_AUTO_LIMIT`): this engine
  cannot answer the question (callers fall back to a certified RDP bound)."""


# Largest automatic grid interval, in loss units. The interval grows (doubling)
# while a grid exceeds the memory caps. Coarser grids would still be
# certified, but the inputs that need them (losses of 1e7-1e9: σ <= 1e-3)
# take this engine tens of seconds per doubling, where the batched kernel
# (jaxdp.pld) answers in about one; failing fast lets callers fall back.
_H_AUTO_LIMIT = 1.0


def _discretize(pair, h, zeta, cache, optimistic=True):
  key = (id(pair), h, optimistic)
  if key not in cache:
    try:
      cache[key] = (_pairs.discretize(pair, h, zeta=zeta, optimistic=optimistic), pair)
    except _pairs_discretise._GridTooLarge as e:  # pylint: disable=protected-access
      raise TooLarge(*e.args) from None
  return cache[key][0]


def _moments(pmf, h):
  p = pmf.p
  m = p.sum()
  if m <= 0:
    return 0.0
  x = pmf.offset + (pmf.lo + np.arange(p.size)) * h
  mu = float((p * x).sum() / m)
  return float((p * (x - mu) ** 2).sum() / m)


def loss_variance(mech, cache=None):
  """One-step privacy-loss variance of a ``pairs.Mechanism`` (max over its
  directions), from pessimistic discretisations refined until h <= sd/4."""
  cache = {} if cache is None else cache
  v = 0.0
  for pair in {id(mech.remove): mech.remove, id(mech.add): mech.add}.values():
    hc, var = 1e-2, 1.0
    for _ in range(4):
      try:
        var = _moments(_discretize(pair, hc, 1e-30, cache, optimistic=False)[0], hc)
      except TooLarge:
        break
      if var >= 16 * hc * hc or hc <= _H_MIN:
        break
      hc = max(math.sqrt(var) / 4, _H_MIN)
    v = max(v, var)
  return v


def grid_interval(phases, rtol=1e-3):
  """The automatic grid interval h for ``phases`` (see the module docstring)."""
  phases = _validate(phases)
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if not phases:
    return _H_MAX
  cache = {}
  total_v, total_c = 0.0, 0
  for mech, count in phases:
    total_v += count * loss_variance(mech, cache)
    total_c += count
  h = float(np.clip(math.sqrt(0.5 * rtol * total_v / total_c), _H_MIN, _H_MAX))
  # Put the smallest top loss (an atom or pile-up: ε0 of pure DP, 1/b of
  # Laplace, -log(1-q) in the add direction of subsampling) on the grid.
  tops = [t for mech, _ in phases for pair in (mech.remove, mech.add)
          for t in [_pairs_discretise.top_loss(pair)] if h <= t <= 100.0]
  if tops:
    top = min(tops)
    h = top / math.ceil(top / h * (1 - 1e-12))
  return h


# --------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------


def _run(phases, h, automatic, kappa, fn, focus, sides=(0, 1)):
  """Discretises and composes both directions; retries coarser h when automatic.

  ``sides`` as in :func:`compose` (the optimistic PMFs are not built without 1)."""
  total = sum(c for _, c in phases)
  zeta = kappa / total
  dirs = ["remove"] if all(m.remove is m.add for m, _ in phases) else ["remove", "add"]
  if automatic:
    h = _first_attempt(phases, h, zeta, kappa, dirs)
  while True:
    try:
      cache = {}

      def one(name, h=h):
        pmfs = [_discretize(getattr(m, name), h, zeta, cache, optimistic=1 in sides)
                for m, _ in phases]
        # fn reads the composed PMFs on this attempt's grid h (grown from the
        # caller's when automatic)
        return fn(*compose(pmfs, [c for _, c in phases], h, kappa, focus, sides), h)

      # the add and remove directions side by side (0.55 -> 0.3 s for MNIST on 2 cores)
      return nx.thread_map(one, dirs, jax_work=False)
    except TooLarge as e:
      if not automatic:
        raise ValueError(
            f"value_discretization_interval={h!r} needs a grid beyond the memory budget "
            f"({e} points; at most {_general_compose.MAX_WINDOW} composed); "
            "use a larger interval.") from None
      if h >= _H_AUTO_LIMIT:
        raise GridTooLarge(
            f"phases: the tight (PLD) accountant cannot compose these phases within its "
            f"memory budget ({e} grid points at the coarsest automatic interval, at most "
            f"{_general_compose.MAX_WINDOW}): the privacy loss spans too wide a range "
            "(very small noise or very many steps); use an RDP accountant for this question.") from None
      h = min(_coarser(h, e), _H_AUTO_LIMIT)


# The trial grid of :func:`_first_attempt` is this much coarser than the
# attempt's (1/16 of its cells, so about 1/16 of its discretisation time).
_TRIAL_COARSER = 16.0


def _first_attempt(phases, h, zeta, kappa, dirs):
  """The automatic interval to try first: ``h``, or coarser where a trial on
  a ``_TRIAL_COARSER`` times coarser grid shows the composed window at h to
  be over 2.5x ``MAX_WINDOW``.

  A failed attempt costs a full discretisation at h (q = 4.7e-6, σ = 0.74,
  T = 48124: 4.5-5.4 s per direction on the 2-core CPU, then the window
  check fails at 5.9x the cap). The trial's window (its Chernoff edges come
  from a 4096-block summary of the PMF, so a coarser grid moves them
  little; every 4th λ of the composition's grid) predicts that overshoot:
  on 25 whole-domain draws between 0.09x and 1.32x the one found at h. h
  then grows by half of it, so that an over-prediction of up to 2x still
  leaves the attempt at or below the h that the retries after a failure at
  h reach (:func:`_coarser` finishes the job from there). Only the interval
  tried changes: every h gives a certified answer. The trial costs ~3-4% of
  a question that fits (5-9 ms of 130-300 ms).
  """
  hc = h * _TRIAL_COARSER
  over = 0.0
  for name in dirs:
    try:
      pess = [_discretize(getattr(m, name), hc, zeta, {}, optimistic=False)[0]
              for m, _ in phases]
    except TooLarge as e:   # the trial's one-step grid alone is over its cap
      return min(h * max(e.overshoot * _TRIAL_COARSER / 2.0, 1.0), _H_AUTO_LIMIT)
    width = _general_compose.window_width(pess, [c for _, c in phases], hc, kappa, every=4)
    over = max(over, width / h / _general_compose.MAX_WINDOW)
  return min(h * over / 2.0, _H_AUTO_LIMIT) if over >= 2.5 else h


def _coarser(h, err):
  """The next automatic interval after a grid that did not fit: grids shrink
  as 1/h, so h grows by the overshoot (points needed / cap) with 10% to
  spare, by at least 1.25 (doubling where the overshoot is unknown). One
  step instead of log2(overshoot) doublings, each of which discretised and
  composed in full (q = 4.7e-6, σ = 0.74, T = 48124, δ at ε = 0: 29.6 ->
  16.9 s, and a narrower interval). Where grids do scale as 1/h, the h
  reached is within 10% of the finest that fits (doubling could land up to
  2x above it); every h gives a certified answer."""
  over = err.overshoot
  return h * (max(1.1 * over, 1.25) if over > 1.0 else 2.0)


def _prepare(phases, value, name, check, value_discretization_interval, rtol):
  phases = _validate(phases)
  nx.check_array(name, value, **check)
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if value_discretization_interval is not None:
    nx.check_array("value_discretization_interval", value_discretization_interval,
                   low=0.0, low_open=True)
  value = np.asarray(value, np.float64)
  if not phases or value.size == 0:
    return [], value, None
  h = (grid_interval(phases, rtol) if value_discretization_interval is None
       else float(value_discretization_interval))
  return phases, value, h


def delta(phases, epsilon, *, value_discretization_interval=None, rtol=1e-3, return_bounds=False):
  """δ(ε) of the composition of ``phases`` (max over add/remove).

  Args:
    phases: sequence of ``(jaxdp.pairs.Mechanism, count)``, count a whole number >= 0.
    epsilon: ε >= 0 (array; +inf allowed), evaluated on one composed PLD.
    value_discretization_interval: grid interval h > 0; None picks
      :func:`grid_interval`.
    rtol: target relative accuracy of the automatic h, in (0, 0.1].
    return_bounds: return ``(lower, upper)`` instead of the upper bound.

  Returns:
    Certified upper bound on δ(ε) (float64 NumPy), or ``(lower, upper)``.

  Raises:
    ValueError: naming the argument on bad input, or when a user-given h needs
      a grid beyond the memory budget.
  """
  phases, eps, h = _prepare(phases, epsilon, "epsilon", dict(low=0.0, allow_inf=True),
                            value_discretization_interval, rtol)
  if not phases:
    z = np.zeros(eps.shape)
    return nx.to_host((z, z)) if return_bounds else nx.to_host(z)
  res = _run(phases, h, value_discretization_interval is None, _KAPPA,
             lambda pe, op, sh, hr: (delta_of(op, hr, eps, False, sh),
                                     delta_of(pe, hr, eps, True, sh)),
             dict(eps=float(np.min(eps[np.isfinite(eps)], initial=np.inf))))
  lo = np.max([r[0] for r in res], axis=0)
  up = np.max([r[1] for r in res], axis=0)
  lo, up = _guard("delta", phases, eps, lo, up)
  return nx.to_host((lo, up)) if return_bounds else nx.to_host(up)


def _epsilon_bounds(phases, target, h, automatic, sides=(0, 1)):
  """(lower, upper) ε at the δ's ``target``, each the max over the directions
  (None for a side not in ``sides``). κ and the tilt's focus depend on the
  target alone, so a bound computed alone equals the one computed with both."""
  kappa = min(_KAPPA, 1e-6 * float(target.min()))
  res = _run(phases, h, automatic, max(kappa, 1e-300),
             lambda pe, op, sh, hr: tuple(
                 epsilon_of((pe, op)[s], hr, target, s == 0, sh) if s in sides else None
                 for s in (1, 0)),
             dict(log_delta=math.log(float(target.min()))), sides=sides)
  lo, up = (np.max([r[i] for r in res], axis=0) if s in sides else None
            for i, s in ((0, 1), (1, 0)))
  return lo, up


def epsilon(phases, delta, *, value_discretization_interval=None, rtol=1e-3, return_bounds=False):  # pylint: disable=redefined-outer-name
  """Smallest ε with δ(ε) <= ``delta`` for the composition of ``phases``.

  Args:
    phases: as in :func:`delta`.
    delta: target δ in (0, 1] (array), all on one composed PLD.
    value_discretization_interval, rtol, return_bounds: as in :func:`delta`.

  Returns:
    Certified upper bound on ε (+inf where the +∞ mass alone exceeds δ), or
    ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: as in :func:`delta`.
  """
  phases, target, h = _prepare(phases, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
                               value_discretization_interval, rtol)
  if not phases:
    z = np.zeros(target.shape)
    return nx.to_host((z, z)) if return_bounds else nx.to_host(z)
  lo, up = _epsilon_bounds(phases, target, h, value_discretization_interval is None)
  lo, up = _guard("epsilon", phases, target, lo, up)
  return nx.to_host((lo, up)) if return_bounds else nx.to_host(up)


def epsilon_side(phases, delta, *, upper=True, rtol=1e-3):  # pylint: disable=redefined-outer-name
  """One bound of :func:`epsilon`'s interval, at about half its cost.

  The upper bound is bit-identical to :func:`epsilon`'s (the pessimistic
  composition does not depend on the optimistic one) and the lower bound to
  the lower end of ``epsilon(..., return_bounds=True)`` before its
  ``lower <= upper`` guard, which needs both. One exception: where the grid
  of the side not built alone would exceed the memory cap (one-step grids of
  ~4·10⁶ cells), :func:`epsilon` doubles h and this does not; both results
  are certified bounds. The upper bound keeps the
  one-step guard (δ_1(ε_upper) <= δ). Calibration probes use this
  (:mod:`jaxdp._src.solvers.tight`).

  Args:
    phases, delta, rtol: as in :func:`epsilon` (automatic grid interval).
    upper: True for the certified upper bound, False for the lower one.

  Returns:
    The bound (float64 NumPy, the shape of ``delta``).
  """
  phases, target, h = _prepare(phases, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
                               None, rtol)
  if not phases:
    return nx.to_host(np.zeros(target.shape))
  lo, up = _epsilon_bounds(phases, target, h, True, sides=(0,) if upper else (1,))
  out = up if upper else lo
  if upper:
    _, out = _guard("epsilon", phases, target, np.zeros(out.shape), out)
  elif np.any(np.isnan(out)):
    out = np.where(np.isnan(out), 0.0, out)
  return nx.to_host(out)


def one_step_delta(phases, epsilon):  # pylint: disable=redefined-outer-name
  """Largest exact one-step δ(ε) over the phases' mechanisms and directions (a
  lower bound on the composed δ), or None where a pair has no closed form."""
  eps = np.asarray(epsilon, np.float64)
  best = np.zeros(eps.shape)
  for mech, _ in phases:
    for pair in {id(mech.remove): mech.remove, id(mech.add): mech.add}.values():
      v = _pairs.hockey_stick(pair, np.where(np.isinf(eps), 0.0, eps))
      if v is None:
        return None
      best = np.maximum(best, np.where(np.isinf(eps), 0.0, v))
  return best


def _guard(name, phases, value, lo, up):
  """lower <= upper; δ_upper >= one-step δ; one-step δ(ε_upper) <= target."""
  tol = 1e-9
  bad = lo > up * (1 + tol) + 1e-300
  if name == "delta":
    one = one_step_delta(phases, value)
    if one is not None:
      bad = bad | (up < one * (1 - tol))
      lo = np.maximum(lo, one * (1 - 1e-6))
  else:
    fin = np.isfinite(up)
    one = one_step_delta(phases, np.where(fin, up, 0.0))
    if one is not None:
      bad = bad | (fin & (one > value * (1 + tol) + 1e-300))
  bad = bad | np.isnan(up)
  if np.any(bad):
    i = int(np.flatnonzero(bad)[0])
    msg = (f"general PLD {name} failed a soundness guard at flat index {i}: lower="
           f"{np.ravel(lo)[i]!r}, upper={np.ravel(up)[i]!r}. This is a jaxdp bug; the trivial "
           "bound is returned instead.")
    if _guards.strict():
      raise _guards.GuardViolation(msg)
    warnings.warn(msg, _guards.GuardWarning, stacklevel=3)
    up = np.where(bad, np.inf if name == "epsilon" else 1.0, up)
  return np.minimum(lo, up), up

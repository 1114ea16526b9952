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
Wang (ICML 2018, Thm 8) for :func:`analytic_gaussian`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from jaxdp._src.solvers import boundary_eval as _calibrate_boundary
from jaxdp._src.core import numerics as nx
from jaxdp._src.core import roots
from jaxdp._src.kernels import rdp
from jaxdp._src.events import is_sampler
from jaxdp._src.solvers.boundary import _boundary
from jaxdp._src.solvers.boundary_eval import (_DEFAULT_CHEAP, _check_epsilon,
                                            _closed_form_steps, _default_orders_guess,
                                            _map_chunks, _orders_key, _per_step_fn)
from jaxdp._src.solvers.calibrate_grad import _diff_eps, _promote, _solve_sigma
from jaxdp._src.kernels import profiles as _profiles

__all__ = [
    "sigma",
    "steps",
    "sampling_rate",
    "analytic_gaussian",
    "differentiable_epsilon",
    "solve_sigma",
    "SIGMA_RANGE",
    "MIN_SAMPLING_RATE",
    "MAX_STEPS",
]

#: σ is searched in this range: σ = SIGMA_RANGE[0] is returned when it already
#: meets the target, inf when even SIGMA_RANGE[1] does not.
SIGMA_RANGE = _calibrate_boundary.SIGMA_RANGE
#: Smallest sampling rate searched; below it ``sampling_rate`` returns 0.
MIN_SAMPLING_RATE = _calibrate_boundary.MIN_SAMPLING_RATE

#: The largest number of steps jaxdp accepts, 2**53 (every whole number up to it
#: is exact in float64; larger step counts are refused with a ValueError).
#: :func:`steps` returns it where every number of steps fits.
MAX_STEPS = _calibrate_boundary.MAX_STEPS
_MAX_STEPS = _calibrate_boundary.MAX_STEPS_FLOAT


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
  from jaxdp._src.kernels import rdp_driver  # pylint: disable=g-import-not-at-top
  checked = rdp_driver.validate_orders(orders)
  full = rdp.DEFAULT_ORDERS if checked is None else checked
  return checked, np.sort(np.unique(np.asarray(full, np.float64)))


def _flat(shape, *arrays):
  return [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1).copy() for a in arrays]


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

  One answer per row, whatever batch it arrives in: a target ε = 0 (met
  with δ > 0 once σ is large enough: ε jumps to 0 there) takes the same
  feasibility search alone or in any batch (bitwise the same σ, the smallest
  to rtol whose ε is 0; ``accountant="pld"`` gives the same RDP boundary,
  checked by the PLD, never above it). Other targets are solved by a probe
  search for up to 16 rows and by the batched secant solver beyond; both
  answers meet the target and are tight to rtol, so they differ by at most
  rtol relative (tested; often bitwise equal). :func:`jaxdp.sweep.sigma`
  chunks are calls of this function.

  Special cases: q = 0 or steps = 0 spend nothing → σ = 0. A target that even
  σ = SIGMA_RANGE[1] cannot meet (e.g. ε below what the RDP conversion can
  certify for this δ) → ``inf`` and a :class:`RuntimeWarning`; never NaN.

  Args:
    target_epsilon: ε budget(s) ≥ 0.
    delta: δ in (0, 1).
    q: sampling rate(s) in [0, 1], or a :mod:`jaxdp.sampling` sampler (then
      scalar arguments; σ by bisection on that sampler's ε).
    steps: number(s) of steps (whole numbers ≥ 0).
    accountant: "rdp" (default) or "pld" (tight; bracket rounds of batched
      PLD upper bounds on the targets still open, from the RDP boundary
      (:mod:`jaxdp._src.core.host_bracket`), then one check by
      ``jaxdp.epsilon(accountant="pld")``'s evaluation; ~5 rounds of
      ~10 ms per target, much slower than RDP).
    rtol: relative tolerance on σ, in (0, 0.1].
    orders: RDP orders (default None: every real order α > 1).
    target_tpr: TPR bound(s) in (at_fpr, 1) for attack-aware calibration.
    at_fpr: the FPR(s) in (0, 1) at which ``target_tpr`` applies.

  Returns:
    σ as float64 NumPy (0-d → ``numpy.float64``), the broadcast shape.

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  if target_tpr is not None or at_fpr is not None:
    if target_epsilon is not None or delta is not None:
      raise ValueError("give either target_epsilon and delta, or target_tpr and at_fpr; "
                       f"found target_epsilon={target_epsilon!r}, delta={delta!r}, "
                       f"target_tpr={target_tpr!r}, at_fpr={at_fpr!r}.")
    if target_tpr is None or at_fpr is None:
      raise ValueError(f"target_tpr and at_fpr go together; found target_tpr={target_tpr!r}, "
                       f"at_fpr={at_fpr!r}.")
    if q is None or steps is None or is_sampler(q):
      raise ValueError(f"attack-aware calibration needs a sampling rate q and steps; found "
                       f"q={q!r}, steps={steps!r}.")
    from jaxdp._src.solvers import tradeoff_calibrate  # pylint: disable=g-import-not-at-top
    return tradeoff_calibrate.calibrate_sigma(q, steps, target_tpr=target_tpr, at_fpr=at_fpr,
                                              rtol=max(rtol, 1e-3))
  for name, value in (("target_epsilon", target_epsilon), ("delta", delta), ("q", q),
                      ("steps", steps)):
    if value is None:
      raise ValueError(f"{name} is required (found None).")
  if is_sampler(q):  # batches from a jaxdp.sampling sampler
    from jaxdp._src.solvers import sampler_calibrate as _sampler_calibrate  # pylint: disable=g-import-not-at-top
    _validate_common(target_epsilon, delta, rtol, accountant)
    return _sampler_calibrate.calibrate_sigma(q, target_epsilon, delta, steps, accountant, rtol)
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
      (``with_rate`` in ``jaxdp._src.solvers.sampler_calibrate``) to train with it.

  Returns:
    q in [0, 1], float64 NumPy, the broadcast shape.
  """
  if sampler is not None:
    from jaxdp._src.solvers import sampler_calibrate as _sampler_calibrate  # pylint: disable=g-import-not-at-top
    if not is_sampler(sampler):
      raise ValueError(f"sampler must be a jaxdp.sampling sampler; found {sampler!r}.")
    _validate_common(target_epsilon, delta, rtol, accountant)
    return _sampler_calibrate.calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps,
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
  # Galloping (lo + 2, + 4, ...) where hi is unknown, then integer bisection.
  r = roots.bisect(feasible, lo, hi, tol=1, certified="lower", split="integer",
                   check_ends=False, step0=2.0, limit=_MAX_STEPS)
  return np.clip(r.x, 0.0, _MAX_STEPS)


def _as_steps(t):
  """Step counts as int64: whole floats in [0, 2**53] exactly, inf as MAX_STEPS."""
  t = np.asarray(t, np.float64)
  out = np.where(np.isinf(t) | (t >= _MAX_STEPS), _MAX_STEPS, t).astype(np.int64)
  return out[()] if out.ndim == 0 else out


def analytic_gaussian(epsilon, delta, sensitivity=1.0):
  """Smallest σ of the (unsampled) Gaussian mechanism with δ(ε) ≤ δ, in float64.

  The host-level entry of :func:`jaxdp.profiles.analytic_gaussian_sigma`
  (Balle & Wang, ICML 2018, Thm 8; the exact profile of Thm 4): computed in
  float64 whatever the caller's JAX configuration, returned as NumPy, like
  every calibration. For the jittable kernel that follows the caller's dtype,
  use :func:`jaxdp.profiles.analytic_gaussian_sigma`.

  Args:
    epsilon: ε ≥ 0.
    delta: target δ in (0, 1).
    sensitivity: L2 sensitivity Δ > 0.

  Returns:
    float64 NumPy σ, broadcast shape of the arguments; δ(ε; σ) ≤ δ holds
    for it in float64 (:func:`jaxdp.profiles.gaussian`).

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  def as_f64(x):   # float32 input is computed in float64 too; bad input is named by the kernel
    try:
      return np.asarray(x, np.float64)
    except (TypeError, ValueError):
      return x

  with nx.x64():
    out = _profiles.analytic_gaussian_sigma(as_f64(epsilon), as_f64(delta), as_f64(sensitivity))
    return nx.to_host(out)


def _sampler_steps(sampler, target_epsilon, delta, sigma, accountant):
  """calibrate.steps for a sampler: its galloping search (up to 2**40), then,
  where that fits, the rest of [0, MAX_STEPS] by the same ε (the root
  finder's integer bisection, exact up to 2**53)."""
  from jaxdp._src.solvers import sampler_calibrate as _sampler_calibrate  # pylint: disable=g-import-not-at-top
  t = float(_sampler_calibrate.calibrate_steps(sampler, target_epsilon, delta, sigma, accountant))
  if math.isfinite(t):
    return _as_steps(t)

  def fits(steps_, idx=None):
    e = _sampler_calibrate.epsilon(sampler, sigma, float(np.reshape(steps_, -1)[0]), delta,
                                   accountant)
    return np.array([float(e) <= float(target_epsilon)])

  if fits(_MAX_STEPS)[0]:
    return _as_steps(_MAX_STEPS)
  # 2**40 fits (the galloping search ended there), MAX_STEPS does not.
  r = roots.bisect(fits, 2.0**40, _MAX_STEPS, tol=1, certified="lower", split="integer",
                   check_ends=False)
  return _as_steps(r.x[0])


def steps(target_epsilon, delta, q, sigma, *, accountant: str = "rdp", orders=None):
  """Largest number of steps T with ε(q, σ, T, δ) ≤ target_epsilon, batched.

  At the boundary: ``jaxdp.epsilon`` (the public path) certifies T within
  budget and T + 1 over it (ε is non-decreasing in T); under RDP, T is within
  budget with a relative margin of 1e-10, so that it holds on every path of
  ``jaxdp.epsilon`` (host or compiled, one question or a batch: their values
  agree to 2e-13), and T + 1 is over budget up to that margin. Under RDP the
  first guess comes in closed form per order — T_α = ⌊(ε_target - c_α(δ)) / ε_α⌋
  with c_α the conversion term of :func:`jaxdp.rdp.to_epsilon`, and the KL
  bound T_α ε_α < -log(1 - δ²) — maximised over α (for a batch with the
  default orders: the integer orders ≤ 64, then the real order where the
  public ε is attained there), then verified and fixed by a galloping integer
  search where it was off. The search runs
  over jaxdp's whole domain of step counts, [0, :data:`MAX_STEPS`] = [0, 2**53]:
  where every T fits (q = 0, or at least 2**53 steps) the answer is
  ``MAX_STEPS`` = 2**53 = 9007199254740992, itself verified (not ``inf``).

  Args:
    target_epsilon, delta: the budget (ε ≥ 0, δ in (0, 1)).
    q: sampling rate(s) in [0, 1], or a :mod:`jaxdp.sampling` sampler (then
      scalar arguments; steps of that sampler, epochs charged when started).
    sigma: noise multiplier(s) > 0.
    accountant: "rdp" or "pld".
    orders: RDP orders (default None: every real order α > 1, as :func:`jaxdp.epsilon`).

  Returns:
    T as int64 NumPy (0-d → ``numpy.int64``), the broadcast shape, in
    [0, MAX_STEPS].
  """
  if is_sampler(q):  # batches from a jaxdp.sampling sampler
    _validate_common(target_epsilon, delta, 1e-6, accountant)
    return _sampler_steps(q, target_epsilon, delta, sigma, accountant)
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
      if idx.size <= _calibrate_boundary._SMALL:   # one question: no compilation
        from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
        with np.errstate(all="ignore"):
          per = _host_rdp.per_step_rdp(qq[idx], ss[idx], np.asarray(guess_orders))
        guess = _closed_form_steps(per, guess_orders, t[idx], d[idx])
      elif accountant == "rdp" and orders_checked is None:
        guess = _default_orders_guess(qq[idx], ss[idx], t[idx], d[idx])
      else:
        (per,) = _map_chunks(_per_step_fn(_orders_key(guess_orders)), [qq[idx], ss[idx]],
                             [0.5, 1.0])
        guess = _closed_form_steps(per, guess_orders, t[idx], d[idx])
      acc = accountant

      # Under RDP, T is accepted when its ε inflated by the host checks' margin
      # (once, on the host and the compiled checks alike) meets the target: at a
      # huge T, ε(T) sits within ulps of the target, and the compiled batch
      # check and a single question's path (host or compiled, 2e-13 apart) may
      # round it to either side; the margin makes T hold on every path of
      # jaxdp.epsilon (tests/solvers/test_steps_domain.py).
      def feasible(T, sel):
        e = _check_epsilon(acc, qq[idx][sel], ss[idx][sel], T, d[idx][sel], orders_checked,
                           margin_everywhere=True)
        return e <= t[idx][sel]

      out[idx] = _int_boundary(feasible, np.where(np.isfinite(guess), guess, _MAX_STEPS))
  return _as_steps(out.reshape(shape))


# --------------------------------------------------------------------------
# Differentiable ε and σ*(q) (pure, jittable)
# --------------------------------------------------------------------------


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

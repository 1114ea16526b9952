"""The root finder behind every calibration: bracketing a monotone predicate.

Every calibration of jaxdp asks the same question: where does a monotone
predicate ``feasible(x)`` (e.g. "ε(σ) ≤ target") switch? The answer is an
end of a bracket ``[lo, hi]`` whose two ends were *evaluated*: one proven
feasible, the other proven infeasible, and ``certified`` names which end is
returned (the one proven to meet the target):

* ``certified="upper"``: the feasible set is ``[root, ∞)`` (ε non-increasing
  in x: σ); ``hi`` is returned, the smallest x evaluated feasible.
* ``certified="lower"``: the feasible set is ``(-∞, root]`` (ε non-decreasing
  in x: steps, sampling rate); ``lo`` is returned, the largest x evaluated
  feasible.

Only evaluated points are ever returned, so the answer meets the target by
the very function the predicate evaluates (the public one, in the solvers).

Modes, one contract:

* :func:`bisect` (host, NumPy, vectorised over n problems): bisection with a
  ``split`` strategy: ``"mid"`` (arithmetic midpoint, e.g. in log σ),
  ``"geometric"`` (√(lo·hi), for a positive x searched in ratio), or
  ``"integer"`` (whole numbers; the largest/smallest feasible integer
  exactly, with galloping expansion where the open end is infinite).
* :func:`step_up`: the answer checked as returned by the public function
  (a factor 1 + rtol up where the last bits disagree).
* :func:`false_position` (host, vectorised): geometric bracketing from a
  guess, then safeguarded regula falsi on a smooth excess g(x) (few
  evaluations of an expensive g: the trade-off calibration).
* :class:`~jaxdp._src.core.roots_scalar.Illinois` (host, scalar): the false-position step of the tight
  calibration (a sign-change bracket of g with Illinois halving), driven by
  :mod:`jaxdp._src.solvers.tight`'s own probe schedule.
* :func:`solve_jit` (in-jit, ``lax.while_loop`` on traced values, batched):
  a safeguarded secant (``step="secant"``: offset regula falsi, bisection
  after two moves of the same end, geometric expansion) or plain bisection
  with doubling expansion (``step="bisect"``), for ε evaluated as a traced
  function (the RDP calibrations, and ``calibrate_grad``'s custom JVP).

Two specialised strategies keep their own modules in this layer, because
they spend evaluation *rounds* of expensive host calls, not arithmetic: the
round-minimising host secant :mod:`jaxdp._src.core.host_bracket` (batched
PLD) and the probe grid :mod:`jaxdp._src.core.grid_search`; the scalar
descent from a feasible start :mod:`jaxdp._src.core.descend` serves the
tight sampler calibrations. All follow the same contract.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_MAX_ITER = 100        # iteration budget of the jitted solver
_SPLITS = ("mid", "geometric", "integer")


class Found(NamedTuple):
  """The result of :func:`bisect` (flat arrays of the n problems).

  ``x`` is the certified end (proven feasible; NaN where nothing in the
  range is), ``other`` the other end of the final bracket (proven infeasible
  where ``x`` is interior; equal to ``x`` where the whole range is feasible),
  ``feasible`` whether any x in the range is, ``trivial`` whether all are."""
  x: np.ndarray
  other: np.ndarray
  feasible: np.ndarray
  trivial: np.ndarray


def _check_certified(certified):
  if certified not in ("upper", "lower"):
    raise ValueError(f"certified must be 'upper' or 'lower'; found {certified!r}.")
  return certified == "upper"


def _width(lo, hi, split):
  if split == "geometric":
    return np.log(hi) - np.log(lo)
  return hi - lo


def _split(lo, hi, split):
  """The next probe strictly inside (lo, hi) (finite ends)."""
  if split == "geometric":
    return np.sqrt(lo * hi)
  if split == "integer":
    # lo + ⌊(hi − lo)/2⌋, not ⌊(lo + hi)/2⌋: for whole numbers in [0, 2**53]
    # every term is exact (lo + hi can round above 2**53 and stall the split).
    return lo + np.floor((hi - lo) / 2.0)
  return 0.5 * (lo + hi)


def _ends(feasible, f_end, o_end, check_ends, batch):
  """(ok_f, ok_o): whether the certified end and the other end are feasible.

  The certified end is evaluated for every problem, the other end (with
  ``batch="subset"``) only where the certified one is feasible and the other
  is finite."""
  n = f_end.shape[0]
  if not check_ends:
    return np.ones(n, bool), np.zeros(n, bool)
  ok_f = np.asarray(feasible(f_end, np.arange(n)), bool).reshape(n)
  ok_o = np.zeros(n, bool)
  if batch == "all":
    return ok_f, ok_f & np.asarray(feasible(o_end, np.arange(n)), bool).reshape(n)
  sel = np.nonzero(ok_f & np.isfinite(o_end))[0]
  if sel.size:
    ok_o[sel] = np.asarray(feasible(o_end[sel], sel), bool).reshape(sel.size)
  return ok_f, ok_o


def bisect(feasible: Callable[[np.ndarray, np.ndarray], np.ndarray], lo, hi, *, tol,
           certified: str = "upper", split: str = "mid", check_ends: bool = True,
           batch: str = "subset", step0=1.0, limit=None, max_iter: int = 200,
           size=None) -> Found:
  """Where a monotone predicate switches, for n problems at once, by bisection.

  Args:
    feasible: ``feasible(x, idx)`` -> bool (m,) for the problems ``idx`` (m,)
      at x (m,); monotone in x (see ``certified``).
    lo, hi: (n,) or scalar ends of the search range (``lo < hi``). With
      ``check_ends=False`` the certified end is known feasible and the other
      end known infeasible; the other end may then be infinite (``+inf`` for
      ``certified="lower"``, ``-inf`` for ``"upper"``): it is found by
      galloping expansion from the certified end, steps ``step0``, doubling.
    tol: stop when the bracket is at most this wide (in x; in log x with
      ``split="geometric"``; use 1 with ``split="integer"``: adjacent
      integers, the exact boundary).
    certified: ``"upper"`` (feasible set [root, ∞), ``hi`` returned) or
      ``"lower"`` (feasible set (-∞, root], ``lo`` returned).
    split: ``"mid"``, ``"geometric"`` (positive ends) or ``"integer"``
      (whole-number ends and probes).
    check_ends: evaluate the ends first (the certified end for all problems,
      the other where the certified one is feasible): a problem infeasible
      at its certified end has no answer (``x`` NaN), one feasible at its
      other end is trivial (``x`` = that end).
    batch: ``"subset"`` evaluates only the open problems each round;
      ``"all"`` evaluates every problem every round (closed ones at their
      certified end: one fixed shape for a compiled ε).
    step0: first expansion step (an infinite other end only).
    limit: the expansion stops at this x (an end of the range, inclusive).
    max_iter: rounds at most.
    size: the number of problems n where ``lo`` and ``hi`` are both scalars
      (default 1).

  Returns:
    :class:`Found`.
  """
  up = _check_certified(certified)
  if split not in _SPLITS:
    raise ValueError(f"split must be one of {_SPLITS}; found {split!r}.")
  lo, hi = np.broadcast_arrays(np.asarray(lo, np.float64), np.asarray(hi, np.float64),
                               np.zeros(1 if size is None else size))[:2]
  lo, hi = lo.reshape(-1).copy(), hi.reshape(-1).copy()
  n = lo.shape[0]
  f_end, o_end = (hi, lo) if up else (lo, hi)
  ok_f, ok_o = _ends(feasible, f_end, o_end, check_ends, batch)
  step = np.broadcast_to(np.asarray(step0, np.float64), (n,)).copy()
  lim = (-np.inf if up else np.inf) if limit is None else float(limit)
  for _ in range(max_iter):
    f_end, o_end = (hi, lo) if up else (lo, hi)
    open_ = np.isinf(o_end)
    with np.errstate(invalid="ignore"):
      todo = ok_f & ~ok_o & np.where(open_, (f_end > lim) if up else (f_end < lim),
                                     _width(lo, hi, split) > tol)
    if not todo.any():
      break
    idx = np.arange(n) if batch == "all" else np.nonzero(todo)[0]
    l, h, t, o = lo[idx], hi[idx], todo[idx], open_[idx]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
      grown = np.maximum(h - step[idx], lim) if up else np.minimum(l + step[idx], lim)
      mid = np.where(o, grown, _split(l, h, split))
    x = np.where(t, mid, h if up else l)
    good = np.asarray(feasible(x, idx), bool).reshape(idx.size)
    move_hi = t & (good if up else ~good)
    move_lo = t & (~good if up else good)
    hi[idx] = np.where(move_hi, x, h)
    lo[idx] = np.where(move_lo, x, l)
    step[idx] = np.where(t & o, 2.0 * step[idx], step[idx])
  f_end, o_end = (hi, lo) if up else (lo, hi)
  x = np.where(ok_o, o_end, f_end)
  return Found(np.where(ok_f, x, np.nan), np.where(ok_o, o_end, np.where(ok_f, o_end, np.nan)),
               ok_f, ok_o)


def step_up(feasible: Callable[[np.ndarray], np.ndarray], x, factor, tries, active=None):
  """The certified side checked as returned: x·factor until ``feasible``.

  For a ``certified="upper"`` answer x (n,) of a finder whose predicate may
  disagree with the public check in the last bits, re-evaluates ``feasible``
  on all n (one shape) and multiplies the failing entries by ``factor``
  (> 1), at most ``tries`` times; the last step is not re-checked.

  Args:
    feasible: x (n,) -> bool (n,), the public check.
    x: (n,) answers.
    factor: the step (1 + rtol).
    tries: checks at most.
    active: (n,) bool, the entries to check (default all).

  Returns:
    ``(x, ok)``: the answers, and whether a check passed for every active
    entry.
  """
  x = np.asarray(x, np.float64)
  active = np.ones(x.shape, bool) if active is None else active
  for _ in range(tries):
    bad = active & ~np.asarray(feasible(x), bool)
    if not bad.any():
      return x, True
    x = np.where(bad, x * factor, x)
  return x, False


def _expand(excess, x, x_min, x_max, step):
  """Geometric bracketing for :func:`false_position`: from x, steps doubling.

  Returns (x_lo, g_lo, x_hi, g_hi): the largest infeasible and smallest
  feasible x evaluated (NaN where none)."""
  n = x.size
  x_lo, x_hi, g_lo, g_hi = (np.full(n, np.nan) for _ in range(4))
  step = np.full(n, step)
  todo = np.arange(n)
  while todo.size:
    g = excess(np.exp(x[todo]), todo)
    ok = g <= 0
    x_hi[todo[ok]], g_hi[todo[ok]] = x[todo[ok]], g[ok]
    x_lo[todo[~ok]], g_lo[todo[~ok]] = x[todo[~ok]], g[~ok]
    x = x.copy()
    x[todo] = np.clip(np.where(ok, x[todo] - step[todo], x[todo] + step[todo]), x_min, x_max)
    step[todo] *= 2.0
    done = ((~np.isnan(x_lo[todo])) & (~np.isnan(x_hi[todo]))
            | (ok & (x_hi[todo] <= x_min)) | (~ok & (x_lo[todo] >= x_max)))
    todo = todo[~done]
  return x_lo, g_lo, x_hi, g_hi


def _regula_falsi(excess, x_lo, g_lo, x_hi, g_hi, tol):
  """Safeguarded regula falsi for :func:`false_position` on a bracket."""
  last = np.zeros(x_lo.size)     # +1: x_hi moved last, -1: x_lo moved last
  streak = np.zeros(x_lo.size)
  while True:
    act = np.nonzero(x_hi - x_lo > tol)[0]
    if not act.size:
      break
    lo_, hi_, w = x_lo[act], x_hi[act], x_hi[act] - x_lo[act]
    frac = g_lo[act] / np.maximum(g_lo[act] - g_hi[act], 1e-300)
    xp = lo_ + np.clip(frac, 0.0, 1.0) * w - 0.5 * tol * last[act]
    xp = np.where(streak[act] >= 2, 0.5 * (lo_ + hi_), xp)
    xp = np.clip(xp, lo_ + 0.25 * tol, hi_ - 0.25 * tol)
    g = excess(np.exp(xp), act)
    ok = g <= 0
    side = np.where(ok, 1.0, -1.0)
    streak[act] = np.where(side == last[act], streak[act] + 1, 1)
    last[act] = side
    x_hi[act[ok]], g_hi[act[ok]] = xp[ok], g[ok]
    x_lo[act[~ok]], g_lo[act[~ok]] = xp[~ok], g[~ok]
  return x_hi


def false_position(excess: Callable[[np.ndarray, np.ndarray], np.ndarray], x0, x_min, x_max,
                   tol, step0=math.log(1.3)):
  """Smallest s = e^x (to a factor e^tol) with ``excess(s) <= 0``, batched.

  ``certified="upper"`` in x = log s for a smooth excess g non-increasing in
  x (each evaluation expensive): geometric bracketing from ``x0`` (steps of
  ``step0`` in x, doubling), then a safeguarded regula falsi (the
  interpolated root offset by tol/2 toward the end that has not moved, so
  both ends close in; a bisection when one end moves twice in a row) until
  the ends are within ``tol``.

  Args:
    excess: ``excess(s, idx)`` -> g (m,) at s (m,) for the problems idx.
    x0: (n,) starts in log s, within [x_min, x_max].
    x_min, x_max: the search range in log s.
    tol: bracket width at the end, in log s.
    step0: the first bracketing step in log s.

  Returns:
    ``(x_hi, unreachable, at_min)``: (n,) the feasible end in log s (only
    evaluated points), whether no x <= x_max was found feasible, and whether
    x_min already is (then ``x_hi == x_min``, up to rounding of the start).
  """
  x_lo, g_lo, x_hi, g_hi = _expand(excess, np.asarray(x0, np.float64), x_min, x_max, step0)
  unreachable = np.isnan(x_hi)
  at_min = np.isnan(x_lo)   # feasible at x_min: nothing to refine
  if unreachable.any():
    return x_hi, unreachable, at_min
  x_lo = np.where(at_min, x_hi, x_lo)
  g_lo = np.where(at_min, 1.0, g_lo)
  return _regula_falsi(excess, x_lo, g_lo, x_hi, g_hi, tol), unreachable, at_min


# --- In-jit mode: a batched safeguarded secant / bisection (lax.while_loop) ---


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


def _propose_bisect(s: _Bracket, xmin, xmax, tol):
  """Next point of ``step="bisect"``: the midpoint, or a step from the one
  known end doubling with each move (from 2·tol), clipped to the range."""
  mid = s.lo + 0.5 * (s.hi - s.lo)
  grow = 2.0 * tol * jnp.exp2(jnp.minimum(s.run, 60).astype(s.lo.dtype))
  p_dn = jnp.maximum(s.hi - grow, xmin)
  p_up = jnp.minimum(s.lo + grow, xmax)
  both = s.has_lo & s.has_hi
  return jnp.where(both, mid, jnp.where(s.has_hi, p_dn, p_up))


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


def _solve_upper(eps_of_x, target, x0, xmin, xmax, tol, max_iter, propose):
  x0 = jnp.clip(x0, xmin, xmax)
  s = _init(x0, eps_of_x(x0), target, xmin, xmax)

  def cond(s):
    return (s.k < max_iter) & jnp.any(~_done(s, xmin, xmax, tol))

  def body(s):
    active = ~_done(s, xmin, xmax, tol)
    p = propose(s, xmin, xmax, tol)
    p = jnp.where(active, p, s.hi)
    return _update(s, p, eps_of_x(p), target, active)

  return jax.lax.while_loop(cond, body, s)


def solve_jit(eps_of_x, target, x0, xmin, xmax, tol, max_iter=_MAX_ITER, *,
              certified: str = "upper", step: str = "secant") -> _Bracket:
  """Boundary of {x : eps_of_x(x) ≤ target} in [xmin, xmax], in jit, batched.

  Pure and jittable (``lax.while_loop``; every argument may be traced, x0
  and target batched). On g(x) = log ε(x) − log target:
  ``step="secant"``: offset regula falsi with bisection after two moves of
  the same end and geometric expansion from the start while one end is
  unknown; ``step="bisect"``: midpoints, expansion steps doubling from
  2·tol.

  Args:
    eps_of_x: traced x -> ε (same shape), monotone: non-increasing in x for
      ``certified="upper"``, non-decreasing for ``"lower"``.
    target, x0: targets and starts (broadcastable to the batch).
    xmin, xmax: the search range.
    tol: absolute tolerance in x.
    max_iter: iteration budget.
    certified: which end is returned as ``hi`` (below).
    step: ``"secant"`` or ``"bisect"``.

  Returns:
    the final bracket: with ``certified="upper"``, ``hi`` is the smallest x
    evaluated feasible (valid where ``has_hi``), ``lo`` the largest
    evaluated infeasible; on convergence ``hi - lo ≤ tol``, or ``hi ==
    xmin`` (feasible everywhere), or ``lo == xmax`` (unreachable). With
    ``"lower"`` the search runs in -x and the returned fields are
    reflected back: ``hi`` is then the *largest* x evaluated feasible and
    ``lo`` the smallest evaluated infeasible (``lo - hi ≤ tol``).
  """
  up = _check_certified(certified)
  if step not in ("secant", "bisect"):
    raise ValueError(f"step must be 'secant' or 'bisect'; found {step!r}.")
  propose = _propose if step == "secant" else _propose_bisect
  if up:
    return _solve_upper(eps_of_x, target, x0, xmin, xmax, tol, max_iter, propose)
  s = _solve_upper(lambda y: eps_of_x(-y), target, -x0, -xmax, -xmin, tol, max_iter, propose)
  return s._replace(lo=-s.lo, hi=-s.hi)

"""jaxdp._src.core.roots: the one root finder of the calibrations.

Checked on monotone functions whose switch point is known in closed form
(square roots, integer square roots): the returned value is on the certified
side (proven feasible by the predicate itself), within tol of the root;
batches mix interior, infeasible and trivial problems; the integer mode
returns the exact largest feasible whole number (math.isqrt as reference);
the in-jit mode runs under jax.jit on traced targets.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import roots
from jaxdp._src.core import roots_scalar


class _Counted:
  """A predicate that records how many points it evaluated."""

  def __init__(self, fn):
    self.fn, self.calls, self.points = fn, 0, 0

  def __call__(self, x, idx):
    self.calls += 1
    self.points += np.size(x)
    return self.fn(x, idx)


@pytest.mark.parametrize("split", ["mid", "geometric"])
def test_upper_side_sigma_like(split):
  """ε(x) = c / x² ≤ 1 ⇔ x ≥ √c: smallest feasible x within tol; c > hi² is
  infeasible (NaN), c < lo² trivial (lo itself)."""
  c = np.array([2.0, 10.0, 1e6, 1e-9, 37.5])
  root = np.sqrt(c)
  tol = 1e-9
  pred = _Counted(lambda x, idx: c[idx] / x ** 2 <= 1.0)
  r = roots.bisect(pred, 1e-3, 100.0, tol=tol, certified="upper", split=split, size=5)
  interior = np.array([True, True, False, False, True])
  assert np.all(c[interior] / r.x[interior] ** 2 <= 1.0)          # certified: feasible
  width = np.log(r.x / root) if split == "geometric" else r.x - root
  assert np.all(width[interior] >= 0) and np.all(width[interior] <= tol)
  assert np.all(c[interior] / r.other[interior] ** 2 > 1.0)       # the other end is not
  assert np.isnan(r.x[2]) and not r.feasible[2]                   # unreachable
  assert r.x[3] == 1e-3 and r.trivial[3]                          # feasible everywhere


def test_lower_side_rate_like():
  """Feasible ⇔ x ≤ root (ε non-decreasing in x): largest feasible x."""
  root = np.array([0.3, 0.9999, 2.0, -1.0])
  pred = lambda x, idx: x <= root[idx]
  r = roots.bisect(pred, 0.0, 1.0, tol=1e-12, certified="lower", size=4)
  assert np.all(r.x[:2] <= root[:2]) and np.all(root[:2] - r.x[:2] <= 1e-12)
  assert r.x[2] == 1.0 and r.trivial[2]
  assert np.isnan(r.x[3]) and not r.feasible[3]


def test_integer_mode_exact_with_galloping():
  """Largest T with T² ≤ c, from T = 0 with an open (infinite) upper end:
  galloping expansion then integer bisection give math.isqrt exactly; the
  limit caps the expansion."""
  c = np.array([0, 1, 2, 99, 100, 10 ** 12 + 3, 7])
  ref = np.array([math.isqrt(int(v)) for v in c], np.float64)
  pred = lambda x, idx: x * x <= c[idx]
  r = roots.bisect(pred, 0.0, np.inf, tol=1, certified="lower", split="integer",
                   check_ends=False, step0=2.0, size=c.size)
  np.testing.assert_array_equal(r.x, ref)
  capped = roots.bisect(pred, 0.0, np.inf, tol=1, certified="lower", split="integer",
                        check_ends=False, limit=500.0, size=c.size)
  np.testing.assert_array_equal(capped.x, np.minimum(ref, 500.0))
  # With checked finite ends: the same integers, and an infeasible start is NaN.
  checked = roots.bisect(pred, np.array([0, 1, 1, 1, 1, 1, 3]), 2.0 ** 40, tol=1,
                         certified="lower", split="integer")
  np.testing.assert_array_equal(checked.x[1:6], ref[1:6])
  assert np.isnan(checked.x[6])


def test_subset_and_all_batches_agree():
  """batch='subset' evaluates only the open problems (fewer points), 'all'
  every problem every round (one shape); the answers are identical."""
  c = np.exp(np.linspace(-6.0, 6.0, 9))   # two infeasible, two trivial
  a = _Counted(lambda x, idx: c[idx] / x <= 1.0)
  b = _Counted(lambda x, idx: (np.asarray(idx).size == c.size) & (c[idx] / x <= 1.0))
  ra = roots.bisect(a, 1e-2, 1e2, tol=1e-6, split="geometric", size=9)
  rb = roots.bisect(b, 1e-2, 1e2, tol=1e-6, split="geometric", batch="all",
                   size=9)
  np.testing.assert_array_equal(ra.x, rb.x)
  assert a.points < b.points


def test_bad_arguments():
  with pytest.raises(ValueError, match="certified"):
    roots.bisect(lambda x, i: x > 0, 0.0, 1.0, tol=0.1, certified="hi")
  with pytest.raises(ValueError, match="split"):
    roots.bisect(lambda x, i: x > 0, 0.0, 1.0, tol=0.1, split="golden")


def test_false_position_smooth_excess():
  """g(s) = log(c / s²) (≤ 0 ⇔ s ≥ √c) from a guess off by e^±2: the feasible
  end is within a factor e^tol above √c and evaluated feasible."""
  c = np.array([0.5, 4.0, 900.0])
  calls = []

  def excess(s, idx):
    calls.append(s.size)
    return np.log(c[idx]) - 2.0 * np.log(s)

  x0 = np.log(np.sqrt(c)) + np.array([2.0, -2.0, 0.1])
  tol = math.log1p(1e-4)
  x_hi, unreachable, at_min = roots.false_position(excess, x0, math.log(0.1), math.log(1e4), tol)
  assert not unreachable.any() and not at_min.any()
  d = x_hi - np.log(np.sqrt(c))
  assert np.all(d >= 0) and np.all(d <= tol)
  assert len(calls) < 40


@pytest.mark.parametrize("step", ["secant", "bisect"])
def test_solve_jit_both_sides(step):
  """Under jax.jit with traced targets: ε(x) = e^{-x} (upper side: smallest
  x with ε ≤ t is -log t) and ε(x) = e^{x} (lower side: largest x is log t);
  a target below ε(xmax) is unreachable, one above ε(xmin) trivial."""
  with nx.x64():
    t = jnp.array([0.5, 1e-3, 1e-12, 50.0])
    tol = 1e-8

    @jax.jit
    def run(t):
      up = roots.solve_jit(lambda x: jnp.exp(-x), t, jnp.zeros(4), -3.0, 10.0, tol, step=step)
      lo = roots.solve_jit(lambda x: jnp.exp(x), t, jnp.zeros(4), -10.0, 3.0, tol,
                           certified="lower", step=step)
      return up.hi, up.has_hi, lo.hi, lo.has_hi

    hi_u, ok_u, hi_l, ok_l = (np.asarray(v) for v in run(t))
  tn = np.asarray(t)
  root = -np.log(tn[:2])
  assert np.all(np.exp(-hi_u[:2]) <= tn[:2]) and np.all(hi_u[:2] - root <= tol)
  assert np.all(hi_u[:2] >= root - 1e-15)
  assert not ok_u[2] and ok_u[3] and hi_u[3] == -3.0
  assert np.all(np.exp(hi_l[:2]) <= tn[:2]) and np.all(np.log(tn[:2]) - hi_l[:2] <= tol)
  assert not ok_l[2] and ok_l[3] and hi_l[3] == 3.0


def test_illinois_false_position():
  """g(y) = 1 - y: the interpolated root of a sign-change bracket is 1; an
  end kept twice has its g halved (Illinois), so the next estimate moves
  towards the end that has not moved; no estimate before a sign change."""
  br = roots_scalar.Illinois(3.0, -2.0)          # feasible end: g(3) = -2
  assert br.false_position() is None
  br.add(0.0, 1.0)                        # infeasible end: g(0) = 1
  assert br.false_position() == pytest.approx(1.0, abs=1e-15)
  br.add(2.0, -1.0)                       # the feasible end moves
  br.add(1.5, -0.5)                       # ... twice: g(a) is halved
  assert (br.a, br.b) == (0.0, 1.5) and br.ga == 0.5
  assert 0.0 < br.false_position() < 1.0


def test_probed_bracket_moves_only_to_evaluated_ends():
  """g(y) = 1 - y (root 1), feasible start 3 not evaluated here: no false
  position until both ends were evaluated by the bracket; then the
  interpolated root, or None where it falls within the margin of an end;
  closed() once the ends are within tol."""
  br = roots_scalar.Probed(3.0)
  assert br.yi is None and not br.closed(10.0) and br.false_position() is None
  br.add(0.0, False, 1.0)
  assert (br.yi, br.yf) == (0.0, 3.0) and br.false_position() is None   # g(3) unknown
  br.add(2.0, True, -1.0)
  assert br.false_position() == pytest.approx(1.0, abs=1e-15)
  br.add(0.97, False, 0.03)     # root at 3% of the width from yi: inside a 5% margin
  assert br.false_position(0.05) is None
  assert br.false_position(0.01) == pytest.approx(1.0, abs=1e-12)
  assert not br.closed(1.0) and br.closed(1.03 + 1e-12)


def test_step_up_checks_as_returned():
  """Entries failing the public check step up by the factor until it passes;
  inactive entries are left alone; ok is False when the tries run out."""
  need = np.array([1.0, 1.0 + 1.5e-9, 5.0, 2.0])
  calls = []

  def feasible(x):
    calls.append(x.size)
    return x >= need

  x, ok = roots.step_up(feasible, np.ones(4), 1.0 + 1e-9, 8,
                        active=np.array([True, True, False, True]))
  assert not ok and x[2] == 1.0 and x[0] == 1.0
  assert need[1] <= x[1] <= need[1] * (1.0 + 2e-9)
  assert set(calls) == {4} and len(calls) == 8
  x, ok = roots.step_up(feasible, np.array([1.0, 1.0 + 2e-9, 5.0, 2.0]), 1.0 + 1e-9, 8)
  assert ok and len(calls) == 9


def test_integer_mode_exact_up_to_2_pow_53():
  """Whole numbers at the top of jaxdp's step domain [0, 2**53]: the largest
  x ≤ R is found exactly (every probe a whole number, none repeated), from a
  known-feasible 2**40 to a known-infeasible 2**53, where lo + hi exceeds
  2**53 and is no longer exact in float64."""
  rng = np.random.default_rng(7)
  top = 2.0**53
  r = np.concatenate([[top - 1, top - 2, top - 3, 2.0**52 + 1, 2.0**40],
                      np.floor(rng.uniform(2.0**40, top, 11))])
  seen = []

  def feasible(x, idx):
    seen.append(np.asarray(x).copy())
    return x <= r[idx]

  out = roots.bisect(feasible, 2.0**40, top, tol=1, certified="lower", split="integer",
                     check_ends=False, size=r.size)
  np.testing.assert_array_equal(out.x, r)
  probes = np.concatenate(seen)
  assert np.all(probes == np.floor(probes)) and np.all((probes >= 2.0**40) & (probes <= top))
  assert len(seen) <= 54


@pytest.mark.parametrize("sigma", [5000.0])
def test_sampler_steps_beyond_2_pow_40(sigma):
  """calibrate.steps for a sampler whose budget lasts past 2**40 steps (the
  sampler search's end) is finished by the root finder's integer mode: the
  answer fits and one more step does not, by the public ε."""
  import jaxdp
  from jaxdp import calibrate, sampling
  s = sampling.shuffle(10**6, 1)
  t = calibrate.steps(3.0, 1e-5, s, sigma)
  assert isinstance(t, np.integer) and 2**40 < t < calibrate.MAX_STEPS
  assert jaxdp.epsilon(s, sigma, int(t), 1e-5) <= 3.0 < jaxdp.epsilon(s, sigma, int(t) + 1, 1e-5)

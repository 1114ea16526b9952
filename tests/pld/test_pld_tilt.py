"""The fast PLD kernel's tilted second pass (jaxdp._src.pld.tilt): where the
proven round-off bound sets the width of the kernel's interval (small δ,
many steps), the configuration is recomposed with its one-step PMFs tilted
towards the query. Checked here: the pieces' rounding directions against
exact arithmetic, the amplified wrap-around bound against a brute-force
cyclic composition, the intervals against the general engine's (an
independent certified implementation), and issue 35's row 3 widths."""

import fractions
import math

import mpmath
import numpy as np
import pytest

from jaxdp import pld, pld_general
from jaxdp._src.pld import fallback as _pld_fallback
from jaxdp._src.pld import tilt as _pld_tilt
from jaxdp._src.mechanisms.registry import poisson_phases


def test_round_g_makes_products_with_integers_exact():
  rng = np.random.default_rng(0)
  for g in 10 ** rng.uniform(-7, 1, 50):
    r = _pld_tilt.round_g(float(g))
    assert 0 < r <= g and r > g * (1 - 2 ** -19)
    for k in rng.integers(-2 ** 33 + 1, 2 ** 33, 20):
      assert fractions.Fraction(r * float(k)) == fractions.Fraction(r) * int(k)


def test_node_factors_bracket_the_exact_exponential():
  """e^{E(J)}, E = log_d - g (J - C), rounded up and down, against mpmath."""
  rng = np.random.default_rng(1)
  for _ in range(30):
    g = _pld_tilt.round_g(float(10 ** rng.uniform(-6, -1)))
    c_all = int(rng.integers(-10 ** 6, 10 ** 6))
    nodes = c_all + rng.integers(-20000, 20000, 64)
    log_d = float(rng.uniform(-50, 50))
    up = _pld_tilt.node_factors(log_d, 1e-13, c_all, g, nodes, upper=True)
    lo = _pld_tilt.node_factors(log_d, 1e-13, c_all, g, nodes, upper=False)
    for j, n in enumerate(nodes):
      exact = mpmath.exp(mpmath.mpf(log_d) - mpmath.mpf(g) * (int(n) - c_all))
      if up[j] < 1e300:
        assert lo[j] <= exact <= up[j]


def _cyclic_and_linear(pmf, lo, steps, size):
  """Linear T-fold composition (float64 convolutions of a short PMF: exact
  to ~1e-16 relative) and its index range."""
  lin = np.array([1.0])
  for _ in range(steps):
    lin = np.convolve(lin, pmf)
  return lin, steps * lo


@pytest.mark.parametrize("g", [0.05, 0.3])
def test_above_wrap_bounds_the_amplified_wrapped_mass(g):
  """Σ_{m>=1} e^{g m n} P(S >= first + m n) (brute force) <= above_wrap."""
  rng = np.random.default_rng(2)
  pmf = rng.random(40) ** 4
  pmf /= pmf.sum() * 1.001
  lo, steps, size = -5, 6, 64
  g = _pld_tilt.round_g(g)
  lin, start = _cyclic_and_linear(pmf, lo, steps, size)
  idx = start + np.arange(lin.size)
  for first in (start + 40, start + 90, start + 130):
    brute = sum(math.exp(g * m * size) * lin[idx >= first + m * size].sum()
                for m in range(1, lin.size // size + 2))
    bound = _pld_tilt.above_wrap(_pld_tilt.Phases([pmf], [lo], [steps]), g, first, size)
    assert brute <= bound * (1 + 1e-12), (first, brute, bound)


def _kernel_alone(monkeypatch, *args):
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  return pld.epsilon(*args, return_bounds=True)


@pytest.mark.parametrize("q,sigma,steps,delta", [
    pytest.param(1e-3, 1.0, 100000, 1e-12, marks=pytest.mark.slow),    # issue 35, row 3
    (0.00393, 2.85, 551, 1e-12),   # the broad benchmark batch's widest at delta 1e-12
    (0.178, 2.8, 36, 1e-12),
    pytest.param(0.000142, 0.772, 4743, 1e-8, marks=pytest.mark.slow),
])
def test_tilted_interval_is_narrow_and_overlaps_the_general_engine(monkeypatch, q, sigma,
                                                                   steps, delta):
  """The kernel alone (no general-engine fallback) is within 1% wide where
  its untilted interval was 4-67% wide, and its interval overlaps the
  general engine's certified one (neither end crosses the other's)."""
  lo, up = _kernel_alone(monkeypatch, q, sigma, steps, delta)
  g_lo, g_up = pld_general.epsilon(poisson_phases(q, sigma, steps), delta, return_bounds=True)
  assert float(lo) <= float(g_up) and float(g_lo) <= float(up)
  assert float(up) - float(lo) <= 0.01 * float(up), (lo, up)


def test_tilted_delta_queries_agree_with_epsilon_queries(monkeypatch):
  """Issue 35, row 3 (q = 1e-3, σ = 1, T = 10⁵, δ = 1e-12), the kernel
  alone: the ε interval is <= 1% wide (untilted, proven bound: [2.27,
  4.17]), and δ at its ends brackets the target, δ_lo(ε_up) <= δ <=
  δ_up(ε_lo), both read through the tilted pass."""
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  q, s, t, d = 1e-3, 1.0, 100000, 1e-12
  e_lo, e_up = pld.epsilon(q, s, t, d, return_bounds=True)
  assert float(e_up) - float(e_lo) <= 0.01 * float(e_up)
  d_lo, _ = pld.delta(q, s, t, float(e_up), return_bounds=True)
  _, d_up = pld.delta(q, s, t, float(e_lo), return_bounds=True)
  assert float(d_lo) <= d <= float(d_up)
  assert float(d_up) <= 10 * d   # the δ interval is tilted too (untilted: ~1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("q,sigma,steps,delta", [
    (1e-3, 1.0, 10 ** 6, 1e-8), (1e-3, 1.0, 10 ** 6, 1e-12), (0.01, 0.05, 10, 1e-12)])
def test_row3_intervals_are_within_one_percent(q, sigma, steps, delta):
  """Issue 35, row 3: every case's public certified interval is <= 1% wide
  and below the RDP answer."""
  import jaxdp
  lo, up = pld.epsilon(q, sigma, steps, delta, return_bounds=True)
  assert float(up) - float(lo) <= 0.01 * float(up)
  assert float(up) <= float(jaxdp.epsilon(q, sigma, steps, delta))


@pytest.mark.slow
def test_kernel_intervals_overlap_the_general_engine_on_a_random_small_delta_sample(monkeypatch):
  """A fixed-seed sample of the small-δ domain (q 1e-4..0.5, σ 0.5..10, T
  10..3e4, δ 1e-8/1e-10/1e-12), the kernel alone (tilted pass included)
  against the general engine: every pair of certified intervals overlaps
  (24 of 24 in the run that added it)."""
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  rng = np.random.default_rng(7)
  n = 24
  q = 10 ** rng.uniform(-4, np.log10(0.5), n)
  s = 10 ** rng.uniform(np.log10(0.5), 1, n)
  t = np.round(10 ** rng.uniform(1, 4.5, n))
  d = 10.0 ** rng.choice([-8, -10, -12], n)
  lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
  for i in range(n):
    g_lo, g_up = pld_general.epsilon(poisson_phases(q[i], s[i], t[i]), d[i], return_bounds=True)
    assert lo[i] <= float(g_up) * (1 + 1e-12) and float(g_lo) <= up[i] * (1 + 1e-12), i

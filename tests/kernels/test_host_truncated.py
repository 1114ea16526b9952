"""The host (NumPy) path of truncated-Poisson accounting (issue 34, row 1).

A sampler question at host level (``jaxdp.epsilon(sampling.poisson(...,
capacity=C), ...)``, its calibrations, the CLI) computes the event's RDP
curve, the binomial-tail brackets of the dominating pair and the overflow
probability in NumPy, with the formulas of the compiled kernels (the same
xp-generic code). These tests hold it to the compiled kernels over the edges
of the domain, to independent references (exact enumeration of tiny
datasets, mpmath binomial tails), and check that nothing compiles.
"""

import itertools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import jaxdp
import sampler_reference as R
from jaxdp import sampling
from jaxdp._src import events as E
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_driver as _rdp_driver
from jaxdp._src.kernels import rdp_truncated as rt
from jaxdp._src.mechanisms import sampled
from jaxdp._src.mechanisms.registry import event_rdp


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


_ORDERS = np.asarray(rdp.DEFAULT_ORDERS, np.float64)


def _edge_events(relation):
  out = []
  for n, q, cap, s in itertools.product([3, 1437, 60000], [0.0, 1e-6, 0.0445, 0.5, 1.0],
                                        [1, 2, 96, "n-1", "n"], [0.05, 1.1, 8.0]):
    cap = {"n-1": n - 1, "n": n}.get(cap, cap)
    if cap <= n:
      out.append(E.TruncatedPoissonGaussian(dataset_size=n, q=q, capacity=cap, sigma=s,
                                            relation=relation))
  return out


def _check_host_curve(ev, orders=_ORDERS):
  host = sampled.host_poisson_rdp(ev, orders)
  compiled = np.asarray(event_rdp(ev, orders, jnp.float64), np.float64)
  for mask in (np.isinf, np.isnan, lambda x: x == 0.0):
    np.testing.assert_array_equal(mask(host), mask(compiled), err_msg=str(ev))
  ok = np.isfinite(compiled) & (compiled > 0)
  np.testing.assert_allclose(host[ok], compiled[ok], rtol=1e-9, err_msg=str(ev))


def test_host_curve_is_the_compiled_curve_over_the_edges():
  """Add/remove: same zeros, infinities and NaNs; finite values within 1e-9
  relative (both are certified; they differ by their own round-off only).
  A fixed sample of the edge grid (the whole grid, and replace-one against
  its compiled curve, ~25 s to build cold: ``-m slow``)."""
  events = _edge_events("add_remove")
  rng = np.random.default_rng(34)
  # every 6th default order (both paths' program grows with the order set:
  # ~24 s to build cold at all 179; the slow test takes them all)
  for i in rng.choice(len(events), 16, replace=False):
    _check_host_curve(events[i], _ORDERS[::6])


def test_host_replace_one_is_the_weak_triangle_of_the_host_add_remove_curve():
  """Replace-one on the host is rdp_relations.replace_one of the host
  add/remove curve (the compiled path's construction), bit for bit."""
  from jaxdp._src.kernels import rdp_relations
  orders = _ORDERS[::6]
  for ev in _edge_events("replace_one")[::35]:
    ar = ev._replace(relation="add_remove")
    expect = rdp_relations.replace_one(lambda a: sampled.host_poisson_rdp(ar, a), orders)
    np.testing.assert_array_equal(sampled.host_poisson_rdp(ev, orders), expect)


@pytest.mark.slow
@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
def test_host_curve_is_the_compiled_curve_over_the_whole_edge_grid(relation):
  for ev in _edge_events(relation):
    _check_host_curve(ev)


@pytest.mark.parametrize("others,q,cap,sigma", [
    ([-1.0, -1.0, -1.0], 0.4, 2, 1.0),     # worst case: truncation swaps -1 for +1
    ([0.0, 1.0, -1.0], 0.5, 1, 1.5),
    ([1.0, -1.0], 0.9, 1, 0.7),
])
def test_host_curve_bounds_exact_enumeration(others, q, cap, sigma):
  """Tiny datasets enumerated exactly in mpmath (independent of the formulas)."""
  orders = np.array([2.0, 3.0, 5.0])
  big = R.poisson_capacity_mixture(others + [1.0], q, cap)
  small = R.poisson_capacity_mixture(others, q, cap)
  exact = np.array([float(R.renyi_both_1d(big, small, int(a), sigma)) for a in orders])
  host = rt.truncated_poisson_gaussian_host(len(others) + 1, q, cap, sigma, orders)
  assert np.all(host >= exact * (1 - 1e-9)), (host, exact)


def _mp_binomial_sides(k, n, p):
  """(P[Bin(n, p) >= k], P[Bin(n, p) < k]) in mpmath: pmf(k) from log-gamma,
  neighbours by the exact ratios, summed outwards until terms fall below
  1e-40 of the sum."""
  p = mp.mpf(p)
  pk = mp.exp(mp.loggamma(n + 1) - mp.loggamma(k + 1) - mp.loggamma(n - k + 1)
              + k * mp.log(p) + (n - k) * mp.log1p(-p))
  up, term, j = mp.mpf(0), pk, k
  while j <= n and (term > up * mp.mpf(10) ** -40 or j == k):
    up += term
    term *= (n - j) * p / ((j + 1) * (1 - p))
    j += 1
  down, j = mp.mpf(0), k - 1
  term = pk * k * (1 - p) / ((n - k + 1) * p) if k >= 1 else mp.mpf(0)
  while j >= 0 and term > down * mp.mpf(10) ** -40:
    down += term
    term *= j * (1 - p) / ((n - j + 1) * p)
    j -= 1
  return up, down


@pytest.mark.parametrize("k,n,p", [
    (96, 1436, 0.0445), (5, 10, 0.3), (1, 1, 0.5), (300, 60000, 256 / 60000),
    (1050, 10**6, 1e-3), (3, 10**9, 1e-9), (9000, 10**5, 0.05), (40, 10**4, 1e-2)])
def test_host_binomial_tail_brackets_mpmath(k, n, p):
  """log P[Bin(n, p) >= k] and log(1 - that) bracketed by the NumPy path,
  which agrees with the compiled one to 1e-11 (padding 1e-11)."""
  with np.errstate(all="ignore"):
    host = rt._binomial_upper_tail(*(np.asarray(v, np.float64) for v in (k, n, p)), xp=np)
  compiled = rt._binomial_upper_tail(*(jnp.asarray(v, jnp.float64) for v in (k, n, p)))
  with mp.workdps(60):
    log_t, log_u = (float(mp.log(v)) for v in _mp_binomial_sides(k, n, p))
  assert float(host.log_t_lo) <= log_t <= float(host.log_t_hi)
  assert float(host.log_u_lo) <= log_u <= float(host.log_u_hi)
  for field in host._fields:
    np.testing.assert_allclose(float(getattr(host, field)), float(getattr(compiled, field)),
                               rtol=1e-11, atol=1e-300)


def test_truncated_poisson_questions_compile_nothing(monkeypatch, cold_programs, record_compilations):
  """A fresh truncated-Poisson RDP question (curve, coupling's overflow term,
  conversion) and the tight accountant's dominating pair run on the host; the
  ε equals the untruncated answer's coupling bound or the two-block RDP, both
  checked against their definitions elsewhere; here only that nothing is
  compiled and the value is finite and above plain Poisson's."""
  smp = sampling.poisson(1437, 64 / 1437, capacity=96)
  # the coupling's untruncated answer: jaxdp.epsilon's own host budget, fresh
  monkeypatch.setattr(_rdp_driver._host_questions, "left", _rdp_driver._HOST_QUESTIONS)
  with record_compilations() as compiles:
    eps = float(jaxdp.epsilon(smp, 1.3, 660, 1e-5))
    sampled.truncated_poisson_gaussian(1437, 64 / 1437, 96, 1.7, both_sizes=True)
  assert compiles == []
  cold_programs()
  plain = float(jaxdp.epsilon(sampling.poisson(1437, 64 / 1437, capacity=1437), 1.3, 660, 1e-5))
  assert np.isfinite(eps) and eps >= plain

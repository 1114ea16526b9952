"""The in-jit accountants' δ never underflows below the true δ (issue 35, point 4).

A δ bound below the smallest normal float (``tiny``: 2.2e-308 in float64,
1.2e-38 in float32) used to come out of ``acc.delta`` as 0 or as a subnormal
whose rounding is no longer relative, where the true δ is positive. The host
path (:func:`jaxdp._src.kernels.rdp_driver.delta_floor`) floors such values at ``tiny``; the
accountant states now carry a pure-DP ε of their composition
(:func:`jaxdp.accountant.event_pure_epsilon`) and floor δ below it.

References are independent of the code under test: the Gaussian mechanism's
exact δ(ε) (Balle & Wang 2018) and closed-form lower bounds on the δ of
compositions of randomized response and of the Laplace mechanism (the
probability that every step reaches its largest loss), all in mpmath; and the
host entry point ``jaxdp.delta`` whose floor the in-jit one must match.
"""

import pickle

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import jaxdp
from jaxdp import accountant as A
from jaxdp import events as E

TINY64 = np.finfo(np.float64).tiny
TINY32 = float(np.finfo(np.float32).tiny)


def _gaussian_delta(sigma, eps):
  """Exact δ(ε) of one Gaussian mechanism with sensitivity 1 (mpmath):
  Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), μ = 1/σ (Balle & Wang 2018, Thm 8)."""
  with mp.workdps(80):
    mu = 1 / mp.mpf(sigma)
    e = mp.mpf(eps)
    return mp.ncdf(mu / 2 - e / mu) - mp.exp(e) * mp.ncdf(-mu / 2 - e / mu)


def _all_top_loss_delta(p_top, loss, steps, eps):
  """A lower bound on δ(ε) of ``steps`` compositions of a mechanism whose
  privacy loss equals its maximum ``loss`` with probability ``p_top``: the
  event that every step reaches it, p_top^T · (1 − e^{ε − T·loss}) (mpmath)."""
  with mp.workdps(50):
    return mp.mpf(p_top) ** steps * (1 - mp.exp(mp.mpf(eps) - steps * mp.mpf(loss)))


def _state64(acc, events):
  with jax.enable_x64(True):
    st = acc.init()
    for ev, n in events:
      st = acc.compose(st, ev, n)
  return st


def _delta64(acc, st, eps):
  with jax.enable_x64(True):
    return np.asarray(jax.jit(acc.delta)(st, jnp.asarray(eps, jnp.float64)), np.float64)


# --------------------------------------------------------------------------
# Regressions: a positive true δ read as 0
# --------------------------------------------------------------------------


@pytest.mark.parametrize("make", [A.rdp, A.cdp], ids=["rdp", "cdp"])
def test_gaussian_delta_below_tiny_is_floored_float64(make):
  """One Gaussian (σ = 1) at ε ≥ 38.6: the exact δ is positive and below
  2.2e-308; the in-jit δ is ``tiny`` exactly, as the host path's (was 0)."""
  acc = make()
  st = _state64(acc, [(E.Gaussian(1.0), 1)])
  eps = np.array([38.6, 40.0, 60.0, 200.0])
  got = _delta64(acc, st, eps)
  for e, g in zip(eps, got):
    true = _gaussian_delta(1.0, e)
    assert 0 < true < TINY64
    assert g >= true
  np.testing.assert_array_equal(got, np.full(eps.shape, TINY64))
  host = np.asarray(jaxdp.delta(1.0, 1.0, 1, eps), np.float64)   # q = 1: the Gaussian
  np.testing.assert_array_equal(got, host)                        # bitwise


def test_pure_dp_composition_below_its_epsilon_is_floored():
  """3000 compositions of ε0-DP events below T·ε0: the worst-case mechanism
  (randomized response, and the Laplace mechanism itself) has a positive δ
  far below 2.2e-308; the RDP accountant reported 0 there."""
  acc = A.rdp()
  cases = [
      # (event, top-loss probability, its loss, ε below T·loss)
      (E.PureDP(1.0), mp.e / (1 + mp.e), 1.0, 2990.0),            # binary RR with e^1
      (E.Laplace(1.0), 0.5, 1.0, 2990.0),                          # loss 1 on x <= 0
      (E.RandomizedResponse(0.5, 2), 0.75, mp.log(3), 3000 * float(mp.log(3)) - 1.0),
  ]
  for ev, p_top, loss, eps in cases:
    st = _state64(acc, [(ev, 3000)])
    lower = _all_top_loss_delta(p_top, loss, 3000, eps)
    assert 0 < lower < TINY64
    assert _delta64(acc, st, eps) == TINY64, ev


# --------------------------------------------------------------------------
# δ = 0 stays 0 where it is exact
# --------------------------------------------------------------------------


def test_pure_dp_at_or_above_its_epsilon_stays_zero():
  """Where ε >= the composition's pure-DP ε the true δ is 0 and an underflowed
  bound stays 0 (RDP and CDP accountants), and so does an empty state."""
  rdp_acc, cdp_acc = A.rdp(), A.cdp()
  for ev, pure in [(E.PureDP(1.0), 3000.0), (E.Laplace(1.0), 3000.0),
                   (E.RandomizedResponse(0.5, 2), 3000 * np.log(3))]:
    st = _state64(rdp_acc, [(ev, 3000)])
    assert float(st.pure_epsilon) >= pure
    assert float(st.pure_epsilon) <= pure * (1 + 1e-12)
    np.testing.assert_array_equal(_delta64(rdp_acc, st, np.array([pure + 1.0, 2 * pure])), 0.0)
  st = _state64(cdp_acc, [(E.PureDP(1.0), 10)])       # ρ = 5: δ underflows beyond ε ≈ 127
  np.testing.assert_array_equal(_delta64(cdp_acc, st, np.array([200.0, 400.0])), 0.0)
  for acc in (rdp_acc, cdp_acc):
    np.testing.assert_array_equal(_delta64(acc, _state64(acc, []), np.array([0.0, 1.0, 60.0])),
                                  0.0)


# --------------------------------------------------------------------------
# Host / in-jit agreement at and near the floor
# --------------------------------------------------------------------------


def test_host_and_in_jit_near_the_floor_float64():
  """ε across the floor (σ = 1, one step): exact ≤ host ≤ in-jit, in-jit
  within 25% of the host (its orders are a grid with chords), both >= tiny."""
  acc = A.rdp()
  st = _state64(acc, [(E.SampledGaussian(1.0, 1.0), 1)])
  eps = np.array([37.0, 37.5, 38.0, 38.2, 38.4, 38.6, 39.0])
  got = _delta64(acc, st, eps)
  host = np.asarray(jaxdp.delta(1.0, 1.0, 1, eps), np.float64)
  for e, g, h in zip(eps, got, host):
    assert float(_gaussian_delta(1.0, e)) <= h <= g <= 1.25 * h, (e, g, h)
  assert np.all(got >= TINY64) and np.all(host >= TINY64)


def test_float32_in_jit_never_below_the_float64_host():
  """Float32 state (x64 off): δ ≥ the float64 host's and the exact δ, never
  0; below float32's smallest normal it is that number exactly."""
  acc = A.rdp()
  st = acc.compose(acc.init(), E.SampledGaussian(1.0, 1.0), 1)
  assert st.rdp.dtype == jnp.float32
  eps = np.array([10.0, 12.0, 13.0, 13.5, 14.0, 14.5, 15.0, 20.0, 40.0, 200.0])
  got = np.asarray(jax.jit(acc.delta)(st, jnp.asarray(eps, jnp.float32)), np.float64)
  host = np.asarray(jaxdp.delta(1.0, 1.0, 1, eps), np.float64)
  for e, g, h in zip(eps, got, host):
    assert mp.mpf(g) >= mp.mpf(h) >= _gaussian_delta(1.0, e) > 0, (e, g, h)
    if h < TINY32 / 2:
      assert g == TINY32, (e, g, h)
    if h > 1e-30:
      assert g <= 1.5 * h, (e, g, h)


# --------------------------------------------------------------------------
# The pure-DP ε under jit, scan, vmap, counts, serialisation
# --------------------------------------------------------------------------


def test_pure_epsilon_survives_scan_vmap_and_traced_counts():
  """Traced events and counts: scan over steps, vmap over q (q = 0 releases
  nothing: δ stays 0), a traced count of 0 (0 · ∞ is not NaN)."""
  acc = A.rdp()
  with jax.enable_x64(True):
    def run(q, sigma, counts):
      def step(st, c):
        return acc.compose(st, E.SampledGaussian(q, sigma), c), None
      st, _ = jax.lax.scan(step, acc.init(), counts)
      return st, acc.delta(st, 200.0)

    sts, d = jax.jit(jax.vmap(run, in_axes=(0, None, None)))(
        jnp.array([0.0, 0.5, 1.0]), 1.0, jnp.array([1, 0, 3]))
    np.testing.assert_array_equal(np.asarray(d), [0.0, TINY64, TINY64])
    np.testing.assert_array_equal(np.asarray(sts.pure_epsilon), [0.0, np.inf, np.inf])

    st, d = jax.jit(run)(jnp.float64(1.0), 1.0, jnp.zeros((4,), jnp.int32))
    assert float(st.pure_epsilon) == 0.0 and float(d) == 0.0

    def pure_run(eps_step):
      st, _ = jax.lax.scan(lambda s, _: (acc.compose(s, E.PureDP(eps_step)), None),
                           acc.init(), None, length=3000)
      return st, acc.delta(st, jnp.array([2990.0, 3001.0]))

    st, d = jax.jit(pure_run)(jnp.float64(1.0))
    assert 3000.0 <= float(st.pure_epsilon) <= 3000.0 * (1 + 1e-9)
    np.testing.assert_array_equal(np.asarray(d), [TINY64, 0.0])


def test_pure_epsilon_float32_batches_and_rounding_up():
  """Float32 sums over an event batch are rounded up: never below the exact
  sum (here 0.1 · 1000, 0.1 not a float32), and above it by at most the
  documented n + 2 ulps of the sum plus the event's 16 and one ``nextafter``."""
  acc = A.rdp()
  st = acc.compose(acc.init(), E.PureDP(jnp.full((1000,), 0.1, jnp.float32)), 1)
  assert st.pure_epsilon.dtype == jnp.float32
  assert 100.0 <= float(st.pure_epsilon) <= 100.0 * (1 + 1025 * np.finfo(np.float32).eps)
  st = acc.compose(st, E.Laplace(3.0), 7)        # 7/3, not a float32 either
  assert float(st.pure_epsilon) >= 100.0 + 7.0 / 3.0


def test_event_pure_epsilon_values():
  """Closed forms of each event's pure-DP ε (float64)."""
  with jax.enable_x64(True):
    pe = lambda ev: float(A.event_pure_epsilon(ev, jnp.float64))  # noqa: E731
    assert pe(E.PureDP(0.7)) == pytest.approx(0.7, rel=1e-14) and pe(E.PureDP(0.7)) >= 0.7
    assert pe(E.Laplace(0.5)) >= 2.0
    assert pe(E.RandomizedResponse(0.25, 4)) >= np.log1p(4 * 0.75 / 0.25)
    assert pe(E.RandomizedResponse(0.0, 4)) == np.inf
    assert pe(E.DiscreteLaplace(0.5, 3)) >= 1.5
    assert pe(E.EpsilonDelta(1.0, 0.0)) >= 1.0 and pe(E.EpsilonDelta(1.0, 1e-6)) == np.inf
    assert pe(E.SampledLaplace(0.0, 1.0)) == 0.0 and pe(E.SampledLaplace(0.1, 1.0)) >= 1.0
    assert pe(E.PMFPair((0.5, 0.5), (0.25, 0.75))) >= np.log(2.0)
    assert pe(E.PMFPair((1.0, 0.0), (0.5, 0.5))) == np.inf
    assert pe(E.SampledGaussian(0.0, 1.0)) == 0.0
    for ev in (E.SampledGaussian(0.1, 1.0), E.Gaussian(5.0), E.DiscreteGaussian(3.0)):
      assert pe(ev) == np.inf
    batch = A.event_pure_epsilon(E.PureDP(jnp.array([0.1, 0.2, 0.3])), jnp.float64)
    assert batch.shape == (3,) and np.all(np.asarray(batch) >= [0.1, 0.2, 0.3])


def test_state_round_trips_and_hand_built_state():
  """The state is a pure pytree (three leaves) that survives flatten /
  unflatten and pickling; a hand-built state (``pure_epsilon=None``, e.g.
  after :func:`jaxdp.tuning.tuned`) is read as unbounded and floored."""
  acc = A.rdp()
  st = _state64(acc, [(E.Gaussian(1.0), 1)])
  leaves, tree = jax.tree_util.tree_flatten(st)
  assert len(leaves) == 3
  back = pickle.loads(pickle.dumps(jax.device_get(st)))
  back = jax.tree_util.tree_unflatten(tree, jax.tree_util.tree_leaves(back))
  assert float(_delta64(acc, back, 60.0)) == TINY64
  hand = A.RdpState(rdp=st.rdp, compensation=st.compensation)
  assert len(jax.tree_util.tree_leaves(hand)) == 2
  assert float(_delta64(acc, hand, 60.0)) == TINY64


def test_optax_in_jit_read_is_floored():
  """``jaxdp.optax.delta`` read inside jit (the known schedule's table, one
  step of q = 1, σ = 1): never 0 where the host answers a positive δ; in
  float64 bitwise the host's floor (was 0 in both dtypes)."""
  from jaxdp import optax as dpo  # pylint: disable=g-import-not-at-top

  def one_step():
    tx = dpo.dp_aggregate(1.0, 1.0, 1.0, seed=0)
    params = {"w": jnp.ones(3)}
    _, st = tx.update({"w": jnp.zeros((4, 3))}, tx.init(params), params)
    return st

  eps = jnp.array([13.5, 20.0, 60.0])
  st = one_step()
  got = np.asarray(jax.jit(dpo.delta)(st, eps), np.float64)
  host = np.asarray(jaxdp.delta(1.0, 1.0, 1, np.asarray(eps, np.float64)), np.float64)
  assert np.all(got >= host) and np.all(got == TINY32)    # host: 5.45e-39, 4.9e-85, tiny64
  with jax.enable_x64(True):
    st = one_step()
    got = np.asarray(jax.jit(dpo.delta)(st, jnp.array([60.0, 200.0])), np.float64)
  np.testing.assert_array_equal(got, np.full(2, TINY64))

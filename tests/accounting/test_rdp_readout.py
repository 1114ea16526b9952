"""Eager read-outs of the RDP accountant answered on the host (rdp_readout).

The host read must be the compiled read's (a traced call of the same
accountant function: float64 to rounding; float32 an upper bound at most it or
within one ulp, and never below the float64 read of the same state), keep the
δ floor and cap, compile nothing, and leave traced calls and reads after the
budget to the compiled program.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import accountant as A
from jaxdp import events as E
from jaxdp._src.accounting import rdp_readout

ORDERS_CUSTOM = np.array([64.0, 1.5, 2.0, 3.25, 8.0, 256.0, 1.01])   # unsorted on purpose


@pytest.fixture
def host_budget(monkeypatch):
  """A fresh process's budget of eager host reads (conftest sets 0)."""
  monkeypatch.setattr(rdp_readout._host_reads, "left", rdp_readout._EAGER_HOST_READS)
  return rdp_readout._host_reads


def _states(acc, n, seed):
  """States composed from whole-domain schedules (Poisson-sampled Gaussians
  over q 1e-6..1, σ 0.05..100, 1..10^6 steps; some with a Laplace or pure-DP
  step, which gives the state a finite pure-DP ε)."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    st = acc.init()
    for _ in range(rng.integers(1, 4)):
      q, s = 10**rng.uniform(-6, 0), 10**rng.uniform(np.log10(0.05), 2)
      st = acc.compose(st, E.SampledGaussian(q, s), int(10**rng.uniform(0, 6)))
    if i % 5 == 0:
      st = acc.compose(st, E.PureDP(0.3), 3)
    elif i % 5 == 1:
      st = A.RdpState(*(jnp.zeros_like(x) for x in st))   # nothing composed
      st = acc.compose(st, E.Laplace(2.0), 5)
    out.append(st)
  return out


def _reads(acc, states, targets, kind):
  """(host, compiled) reads of every state at every target."""
  fn = getattr(acc, kind)
  jitted = jax.jit(fn)
  host = np.array([[np.asarray(fn(st, t)) for t in targets] for st in states])
  compiled = np.array([[np.asarray(jitted(st, t)) for t in targets] for st in states])
  return host, compiled


DELTAS = [1e-300, 1e-12, 1e-5, 0.3, 0.999]
EPSILONS = [0.0, 0.05, 1.0, 4.0, 30.0, 1e4]


@pytest.mark.parametrize("orders", [None, ORDERS_CUSTOM])
def test_float64_host_reads_are_the_compiled_reads(host_budget, orders):
  with jax.enable_x64(True):
    acc = A.rdp(orders)
    states = _states(acc, 10, 0)
    left = host_budget.left
    h, c = _reads(acc, states, DELTAS, "epsilon")
    assert host_budget.left == left - h.size          # every eager read was the host's
    assert h.dtype == c.dtype == np.float64
    np.testing.assert_array_equal(np.isfinite(h), np.isfinite(c))
    np.testing.assert_allclose(h, c, rtol=1e-13, atol=0)
    h, c = _reads(acc, states, EPSILONS, "delta")
    assert h.dtype == np.float64
    np.testing.assert_array_equal(h == 0, c == 0)     # the floor decides the same cells
    np.testing.assert_allclose(h, c, rtol=1e-12, atol=0)
    assert np.all(h <= 1.0) and np.all(h[c > 0] >= np.finfo(np.float64).tiny)


def test_float32_host_reads_are_sound_and_at_most_an_ulp_above_the_compiled(host_budget):
  acc = A.rdp()
  states = _states(acc, 10, 1)
  assert states[0].rdp.dtype == jnp.float32
  h, c = _reads(acc, states, DELTAS[1:], "epsilon")
  assert h.dtype == c.dtype == np.float32
  assert np.all(h <= np.nextafter(c, np.float32(np.inf)))
  with jax.enable_x64(True):   # the float64 read of the very same (float32) values
    acc64 = A.rdp()
    ref = np.array([[np.asarray(jax.jit(acc64.epsilon)(
        A.RdpState(*(jnp.asarray(np.asarray(x), jnp.float64) for x in st)), d))
        for d in DELTAS[1:]] for st in states])
  assert np.all(h >= ref)
  hd, cd = _reads(acc, states, EPSILONS[:-1], "delta")
  assert hd.dtype == np.float32
  assert np.all(hd <= np.nextafter(cd, np.float32(np.inf)))
  assert np.all(hd[cd > 0] >= np.finfo(np.float32).tiny)


def test_the_delta_floor_and_pure_epsilon(host_budget):
  """Where the converted δ underflows: floored at the dtype's smallest normal
  number below the state's pure-DP ε (a Gaussian's is +∞), left at 0 from it
  on (PureDP(0.3) × 3: the true δ is 0 from ε = 0.9), as the compiled read."""
  for x64, tiny in [(True, np.finfo(np.float64).tiny), (False, np.finfo(np.float32).tiny)]:
    with jax.enable_x64(x64):
      acc = A.rdp()
      gauss = acc.compose(acc.init(), E.Gaussian(1.0), 1)
      pure = acc.compose(acc.init(), E.PureDP(0.3), 3)
      for st, eps, want in [(gauss, 1e4, tiny), (pure, 1e4, 0.0)]:
        host, compiled = float(acc.delta(st, eps)), float(jax.jit(acc.delta)(st, eps))
        assert host == compiled == want, (x64, eps, host, compiled)


def test_an_eager_read_compiles_nothing(cold_programs, record_compilations, host_budget):
  del cold_programs
  acc = A.rdp()
  rdp = np.linspace(0.001, 3.0, len(A.rdp().init().rdp)).astype(np.float32)
  st = A.RdpState(jax.device_put(rdp), jax.device_put(np.zeros_like(rdp)),
                  jax.device_put(np.float32(np.inf)))
  with record_compilations() as c:
    e = acc.epsilon(st, 1e-5)
    d = acc.delta(st, 1.0)
  assert c == []
  assert e.dtype == d.dtype == jnp.float32 and e.shape == d.shape == ()
  assert np.isfinite(e) and 0 < d < 1


def test_traced_reads_and_reads_after_the_budget_are_compiled(host_budget):
  acc = A.rdp()
  st = acc.compose(acc.init(), E.SampledGaussian(0.01, 1.1), 1000)
  left = host_budget.left
  jax.jit(acc.epsilon)(st, 1e-5)
  jax.vmap(acc.epsilon, in_axes=(None, 0))(st, jnp.array([1e-5, 1e-6]))
  assert host_budget.left == left
  host = acc.epsilon(st, 1e-5)
  assert host_budget.left == left - 1
  host_budget.left = 0
  compiled = acc.epsilon(st, 1e-5)
  assert host_budget.left == 0
  assert float(host) <= float(np.nextafter(np.float32(compiled), np.float32(np.inf)))


@pytest.mark.parametrize("kind,value,name", [("epsilon", 0.0, "delta"), ("epsilon", 1.0, "delta"),
                                             ("delta", -1.0, "epsilon"),
                                             ("delta", float("nan"), "epsilon")])
def test_bad_targets_raise_naming_the_argument(host_budget, kind, value, name):
  acc = A.rdp()
  st = acc.init()
  left = host_budget.left
  with pytest.raises(ValueError, match=name):
    getattr(acc, kind)(st, value)
  assert host_budget.left == left

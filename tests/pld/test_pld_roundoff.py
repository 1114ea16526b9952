"""The fast PLD kernel's round-off bound (jaxdp._src.pld.compose._compose_group)
against errors measured in long-double arithmetic on small cases.

The bound is proven under one stated model assumption (docs/mathematics.md,
"Round-off of the fast kernel"): each level of the library's FFT adds at most
u + sqrt(5)u + 2mu of error relative to the transformed mass, with the
twiddles' error mu <= 8u. These tests check the assumption on the backend
they run on (the impulse responses are the twiddle tables' products), check
the composed windows' measured error against the bound, and state how loose
the bound may be.
"""

import numpy as np
import pytest
import scipy.fft

import jax.numpy as jnp

from jaxdp._src.core.numerics import x64
from jaxdp._src.pld.compose import _LEVEL_ULPS, _compose_group, _gamma, power_bits

_U = np.finfo(np.float64).eps / 2
pytestmark = pytest.mark.skipif(np.finfo(np.longdouble).eps > 1e-18,
                                reason="needs an extended-precision long double reference")


def _fft_bound(size):
  """The forward transform's bound per unit of mass: gamma_{L+1}(20u)."""
  with x64():
    return float(_gamma(float(size.bit_length()), _LEVEL_ULPS * _U))


@pytest.mark.parametrize("log2n", [8, 12, 16])
def test_forward_fft_error_is_within_the_per_level_model(log2n):
  """Impulses (the twiddle products alone) and non-negative vectors: every
  spectral value is within gamma_{L+1}(20u)·mass of the exact DFT, and the
  impulses' error per level stays below the 8u the model assumes for the
  twiddles (measured ~0.6u per level on the 2-core CPU)."""
  n = 2 ** log2n
  rng = np.random.default_rng(log2n)
  xs = []
  for j in (1, 3, n // 3, n // 2 - 1, n - 1):
    x = np.zeros(n)
    x[j] = 1.0
    xs.append(x)
  xs += [rng.random(n) ** 8, np.exp(-0.5 * ((np.arange(n) - n / 3) / 7.0) ** 2)]
  bound = _fft_bound(n)
  with x64():
    for i, x in enumerate(xs):
      got = np.asarray(jnp.fft.rfft(jnp.asarray(x)))
      exact = scipy.fft.rfft(x.astype(np.longdouble))
      err = float(np.max(np.abs((got - exact).astype(np.complex128)))) / float(np.sum(x))
      assert err <= bound, (i, err / _U)
      if i < 5:   # impulses: the twiddles' own error, per level
        assert err / (log2n + 1) <= 8.0 * _U, (i, err / _U)
        assert bound <= 2000.0 * max(err, _U), (i, bound / err)


def _reference(p, steps, size):
  """The exact cyclic composition, in long double (error ~ T·L·2^-64)."""
  m, n_ph, width = p.shape
  reps = -(-width // size)
  f = np.zeros((m, n_ph, reps * size), np.longdouble)
  f[..., :width] = p
  f = f.reshape(m, n_ph, reps, size).sum(axis=2)
  spec = np.ones((m, size // 2 + 1), np.clongdouble)
  for k in range(n_ph):
    spec = spec * scipy.fft.rfft(f[:, k], axis=-1) ** steps[:, k:k + 1].astype(np.longdouble)
  return scipy.fft.irfft(spec, n=size, axis=-1)


def _rows(rng, width):
  """Three rows of two phases: a Gaussian-like PMF (with a 1e-12 floor in
  row 0) and a 5-point PMF, plus an impulse row (the twiddles' worst case)."""
  p = np.zeros((4, 2, width))
  for r in range(3):
    c, sd = rng.integers(0, width), rng.uniform(2, width / 4)
    g = np.exp(-0.5 * ((np.arange(width) - c) / sd) ** 2) + (1e-12 if r == 0 else 0.0)
    p[r, 0] = 0.999 * g / g.sum()
    p[r, 1, :5] = rng.random(5)
    p[r, 1] /= p[r, 1].sum()
  p[3, 0, width // 2 + 1] = 1.0
  p[3, 1, 1] = 1.0
  return p


@pytest.mark.parametrize("size,width,steps", [
    (4096, 300, 10), (4096, 100, 1000), (8192, 8192, 200),
    (4096, 6000, 50),      # folded: two one-step entries per cycle entry
    (16384, 2000, 5000)])
def test_composed_entries_are_within_the_node_bound(size, width, steps):
  """Every composed entry's error (against the long-double composition) is
  at most the row's ``node_err``. Stated looseness: at most 2·10⁴ on the rows
  with T >= 10 steps (measured ~300-8000), 10⁶ on the two-step row, whose
  measured error (~1e-19) is far below the inverse transform's worst case."""
  rng = np.random.default_rng(size + width + steps)
  p = _rows(rng, width)
  st = np.array([[steps, 3], [steps // 2, 0], [1, 1], [steps, 1]])
  with x64():
    w, node_err = _compose_group(jnp.asarray(p), jnp.asarray(st), size=size,
                                 bits=power_bits(st))
  w, node_err = np.asarray(w), np.asarray(node_err)
  err = np.max(np.abs((w - _reference(p, st, size)).astype(np.float64)), axis=-1)
  assert np.all(err <= node_err), (err, node_err)
  loose = node_err / np.maximum(err, 1e-19)
  assert np.all(loose[[0, 1, 3]] <= 2e4) and loose[2] <= 1e6, loose


def test_host_folding_is_part_of_the_bound():
  """A row whose entries carry a relative error (host folding of 4 entries:
  gamma_3(u); tilting) gets a larger bound than the same exact row."""
  rng = np.random.default_rng(7)
  p = _rows(rng, 4096)
  st = np.array([[100, 1]] * 4)
  with x64():
    _, one = _compose_group(jnp.asarray(p), jnp.asarray(st), size=4096, bits=power_bits(st))
    _, four = _compose_group(jnp.asarray(p), jnp.asarray(st), jnp.full((4,), 3.0 * _U), size=4096,
                             bits=power_bits(st))
  assert np.all(np.asarray(four) > np.asarray(one))

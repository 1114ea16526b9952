"""jaxdp._src.samplers.permutation: the shuffle sampler's permutation, entry by entry.

It must be a bijection of [0, N) for every size (the Feistel widths' edges
4^h and 4^h + 1 included), the coupling the shuffle accounting uses must
hold for every key (N and N + 1 examples with one k: the extra example's
slot gets the example in the last position, every other entry is equal),
the traced and eager paths must agree, and each position's example must be
uniform over keys (chi-square).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxdp import sampling
from jaxdp._src.samplers import permutation


@pytest.mark.parametrize("n,span", [(1, 1), (2, 2), (3, 8), (16, 16), (17, 20), (64, 64),
                                    (65, 66), (1000, 1100), (4097, 8192)])
def test_bijection(n, span):
  for seed in range(3):
    perm = np.asarray(permutation.permute(jax.random.key(seed), np.arange(n), n, span))
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))


@pytest.mark.parametrize("n,b", [(16, 4), (14, 4), (64, 8), (62, 8), (254, 16), (1024, 32)])
def test_neighbour_coupling_for_every_key(n, b):
  """perm_N[p] == perm_{N+1}[p] unless that is N, where it is perm_{N+1}[N]
  (the shuffle sampler's span (k + 1)·B is the same for N and N + 1)."""
  k = n // b
  assert (n + 1) // b == k
  span = (k + 1) * b
  for seed in range(5):
    key = jax.random.key(seed)
    small = np.asarray(permutation.permute(key, np.arange(n), n, span))
    big = np.asarray(permutation.permute(key, np.arange(n + 1), n + 1, span))
    expected = np.where(big[:n] == n, big[n], big[:n])
    np.testing.assert_array_equal(small, expected)
    # The batches differ in at most one example, by a replacement.
    diff = np.nonzero(small[:k * b] != big[:k * b])[0]
    assert diff.size <= 1


def test_traced_equals_eager_and_epochs_differ():
  s = sampling.shuffle(1000, 37)
  key = jax.random.key(7)
  eager = np.stack([np.asarray(s.sample_at(key, t)[0]) for t in (0, 5, 26, 27)])
  traced = np.stack([np.asarray(jax.jit(s.sample_at)(key, t)[0]) for t in (0, 5, 26, 27)])
  np.testing.assert_array_equal(eager, traced)
  assert not np.array_equal(eager[0], eager[3])          # step 27 is epoch 1's step 0


def test_each_position_uniform_over_keys():
  """N = 7: over 6000 keys, the example at each position is uniform (chi-square
  p > 1e-4 per position, Bonferroni over 7)."""
  n, reps = 7, 6000
  keys = jax.random.split(jax.random.key(11), reps)
  perms = np.asarray(jax.vmap(lambda k: permutation.permute(k, jnp.arange(n), n, 8))(keys))
  for p in range(n):
    counts = np.bincount(perms[:, p], minlength=n)
    assert stats.chisquare(counts).pvalue > 1e-4 / n, (p, counts)


def test_bad_sizes_raise():
  with pytest.raises(ValueError, match="span"):
    permutation.permute(jax.random.key(0), np.arange(3), 5, 4)


def test_one_program_serves_every_size(record_compilations):
  """The dataset size and the Feistel width are values of the program, not
  static arguments: a new size with the same positions shape compiles nothing
  (each compiled ~1.2 s on the 2-core CPU when they were static)."""
  pos = jnp.arange(16, dtype=jnp.int32)
  permutation.permute(jax.random.key(0), pos, 16, 16)   # compiled (or loaded) once
  with record_compilations() as compiles:
    for n, span in [(17, 20), (1000, 1100), (4097, 8192), (2**31 - 1, 2**32 - 1)]:
      perm = np.asarray(permutation.permute(jax.random.key(1), pos, n, span))
      assert np.unique(perm).size == 16 and perm.min() >= 0 and perm.max() < n
  assert not compiles, compiles

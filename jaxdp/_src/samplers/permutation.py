"""A pseudorandom permutation of [0, N), read at any positions in O(1) each.

The shuffle sampler needs block i of an epoch's permutation at every step.
Drawing the whole permutation (``jax.random.permutation``) costs O(N log N)
per step, 0.5 s at N = 10⁶ on a CPU, far more than the step it feeds. Here
entry p of the permutation is computed on its own:

* a balanced Feistel network on 2h bits, ``ROUNDS`` rounds whose round
  function is JAX's counter-based PRNG (``fold_in`` of the round key with
  the right half, then ``bits``): a bijection F of [0, 4^h);
* cycle-walking (Black–Rogaway 2002): apply F again while the value is
  ≥ N. Starting from p < N the orbit returns below N (it contains p), so
  this is a bijection of [0, N).

The width h is fixed by a *span* the caller chooses, 4^h ≥ span ≥ N; the
shuffle sampler takes span = (k + 1)·B with k = N // B, so every dataset
size with the same k (the neighbours its accounting covers) walks the same
F, and the expected number of walks is below 4·span/N ≤ 8.

What the accounting needs, and why it holds for every key, not only on
average over keys:
* each example is in exactly one position, so in at most one batch of an
  epoch (a bijection);
* N and N + 1 examples with the same key and the same span are coupled as
  :class:`jaxdp.events.ShuffledGaussian` states: cycle-walking to N skips
  the value N on the orbits of the walk to N + 1, so for every position
  p < N, ``perm_N[p] == perm_{N+1}[p]`` unless that is N (the extra
  example), where it is ``perm_{N+1}[N]`` (the example in the last
  position, unused since k·B ≤ N). One batch differs by a replacement.
The permutation is pseudorandom, as every JAX sampler's randomness is; it is
not drawn uniformly from all N! permutations (a Feistel network gives only
even permutations of its 4^h values), and jaxdp's shuffle accounting does
not assume that it is (one unamplified Gaussian per epoch, by the coupling
above).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp._src.core import persist

ROUNDS = 8


def half_bits(n: int) -> int:
  """h with 4^h ≥ n (h ≥ 1): the Feistel halves' width for a domain of n."""
  return max(1, (max(int(n) - 1, 1).bit_length() + 1) // 2)


def _feistel(round_keys, x, h, mask):
  """The ``ROUNDS``-round network on 2h-bit values (h, mask = 2^h - 1 traced).

  A ``fori_loop`` over the rounds: one copy of the round function in the
  program (the unrolled rounds, with their copy in the cycle-walk, compiled
  for ~1.2 s per dataset size on a 2-core CPU)."""
  def round_(r, lr):
    left, right = lr
    key = round_keys[r]
    f = jax.vmap(lambda d: jax.random.bits(jax.random.fold_in(key, d), (), jnp.uint32))(right)
    return right, left ^ (f & mask)

  left, right = jax.lax.fori_loop(0, ROUNDS, round_, (x >> h, x & mask))
  return (left << h) | right


def permute(key, positions, n: int, span: int) -> jax.Array:
  """Entries ``positions`` of the key's pseudorandom permutation of [0, n).

  Args:
    key: a JAX PRNG key (the epoch's).
    positions: int array of positions in [0, n) (may be traced), 1-D.
    n: the domain size, a whole number in [1, 2**31 - 1] (checked here;
      it enters the compiled program as a value, so every size shares one
      program per ``positions`` shape).
    span: n <= span <= 2**32 - 1: fixes the Feistel width (4^h ≥ span);
      sizes sharing a span share the network (the coupling above).

  Returns:
    int32 array like ``positions``: the examples at those positions.
  """
  if not 1 <= n <= span <= 2**32 - 1:
    raise ValueError(f"permute needs 1 <= n <= span <= 2**32 - 1; found n={n}, span={span}.")
  h = half_bits(span)
  # n and h enter the program as values: one program per positions shape
  # serves every dataset size.
  return _permute(key, positions, jnp.uint32(n), jnp.uint32(h), jnp.uint32((1 << h) - 1))


@persist.jit
def _permute(key, positions, limit, h, mask):
  round_keys = jax.random.split(key, ROUNDS)
  x = _feistel(round_keys, jnp.asarray(positions).astype(jnp.uint32), h, mask)

  def walk(x):
    return jnp.where(x >= limit, _feistel(round_keys, x, h, mask), x)

  x = jax.lax.while_loop(lambda x: jnp.any(x >= limit), walk, x)
  return x.astype(jnp.int32)

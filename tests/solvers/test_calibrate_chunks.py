"""A batched calibration compiles one set of programs.

``jaxdp.calibrate.sigma`` on more than 16 targets runs its rounds in chunks
of 256 configurations; its later rounds, where only a few targets are still
open, must keep that length instead of switching to the 16-configuration
programs (a fresh process's 1000 calibrations compiled the window solver and
the public-path check a second time, ~4 s, to finish 2 targets).
"""

import numpy as np

import jaxdp
from jaxdp._src.solvers import boundary_eval


def _problems(n, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.uniform(0.3, 10.0, n), np.full(n, 1e-5), 10 ** rng.uniform(-3.5, -1.0, n),
          np.round(10 ** rng.uniform(2, np.log10(50000), n)))


def test_rounds_with_few_open_targets_keep_the_batch_chunk(monkeypatch):
  seen = []
  original = boundary_eval._chunk_size   # pylint: disable=protected-access

  def spy(n):
    size = original(n)
    seen.append((n, size))
    return size

  monkeypatch.setattr(boundary_eval, "_chunk_size", spy)
  target, delta, q, steps = _problems(40)
  sigma = jaxdp.calibrate.sigma(target, delta, q, steps)
  assert any(n <= 16 for n, _ in seen), seen          # some round had few open targets
  assert {size for _, size in seen} == {256}, seen
  # ...and the answers still meet their targets by the public function.
  assert np.all(np.asarray(jaxdp.epsilon(q, sigma, steps, delta)) <= target)
  # Outside a batched solve, small calls keep the 16-configuration chunk.
  assert original(5) == 16 and original(17) == 256

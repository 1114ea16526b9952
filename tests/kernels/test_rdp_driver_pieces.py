"""The RDP driver's compiled calls (jaxdp._src.kernels.rdp_driver._pieces).

A call's last chunk (default orders) may run as smaller pieces side by side
on the CPU's cores. Every configuration must keep its value bit for bit: the
pieces use the nodes of the whole chunk, and nothing else of a
configuration's value depends on the other configurations of its call (see
``_pieces`` for the one kernel whose last bit depends on the call's shape).
"""

import numpy as np
import pytest

import jaxdp
from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp_driver


def _plan(monkeypatch, n, cores, sigma=None, built=False):
  monkeypatch.setattr(nx, "cpu_cores", lambda: cores)
  sigma = np.full(n, 1.0) if sigma is None else sigma
  pieces = rdp_driver._pieces(n, rdp_driver._bucket(n), sigma, built=lambda size, nodes: built)
  return [(start, size) for start, size, _ in pieces]


def test_plan(monkeypatch):
  # One chunk on two cores: pieces of 256 (the last one padded).
  assert _plan(monkeypatch, 1000, 2) == [(0, 256), (256, 256), (512, 256), (768, 256)]
  # One core: pieces only while they cost less than the chunk (<= 5 of them).
  assert _plan(monkeypatch, 1000, 1) == [(0, 256), (256, 256), (512, 256), (768, 256)]
  assert _plan(monkeypatch, 2000, 1) == [(0, 2048)]
  # An accelerator (0 CPU cores): whole chunks.
  assert _plan(monkeypatch, 1000, 0) == [(0, 2048)]
  # Several chunks: a small last chunk runs as pieces where their programs
  # are built (else it pads: building them costs more than a chunk), a large
  # one never does.
  assert _plan(monkeypatch, 2048 + 300, 2, built=True) == [(0, 2048), (2048, 256), (2304, 256)]
  assert _plan(monkeypatch, 2048 + 300, 2) == [(0, 2048), (2048, 2048)]
  assert _plan(monkeypatch, 2048 + 1500, 2, built=True) == [(0, 2048), (2048, 2048)]
  # Explicit orders keep whole chunks.
  assert [(a, b) for a, b, _ in rdp_driver._pieces(1000, 2048, np.ones(1000), split=False)] == [
      (0, 2048)]
  # Small calls keep their bucket.
  assert _plan(monkeypatch, 200, 2) == [(0, 256)]
  assert _plan(monkeypatch, 10, 2) == [(0, 16)]


def test_pieces_take_the_nodes_of_their_chunk(monkeypatch):
  monkeypatch.setattr(nx, "cpu_cores", lambda: 2)
  sigma = np.full(1000, 2.0)
  sigma[900] = 0.4   # one σ < 0.5 in the chunk: every piece takes the 64-node rule
  nodes = {k for _, _, k in rdp_driver._pieces(1000, 2048, sigma)}
  assert nodes == {rdp_driver.rdp_nodes_for(sigma)} and len(nodes) == 1
  assert rdp_driver.rdp_nodes_for(sigma[:256]) != rdp_driver.rdp_nodes_for(sigma)


def _batch(n, sigma_lo):
  rng = np.random.default_rng(7)
  q = 10 ** rng.uniform(-8, 0, n)
  q[:2] = [0.0, 1.0]
  sigma = 10 ** rng.uniform(np.log10(sigma_lo), 1.5, n)
  if sigma_lo < 0.5:
    sigma[:256] = np.maximum(sigma[:256], 0.5)   # the first piece alone would take 40 nodes
  steps = np.round(10 ** rng.uniform(0, 7, n))
  delta = 10 ** rng.uniform(-14, -1, n)
  eps = 10 ** rng.uniform(-3, 1.5, n)
  return q, sigma, steps, delta, eps


# 300 configurations: one 2048 chunk, or two pieces of 256. (Programs of other
# shapes may round a last bit differently: the 16 and 256 buckets differ by an
# ulp on a few values. The 256 and 2048 ones agreed on all of 48 000 values
# over the whole domain when this was written.)
def test_pieces_give_the_public_epsilon_of_the_whole_chunk(monkeypatch):
  q, sigma, steps, delta, _ = _batch(300, 0.5)
  assert len(rdp_driver._pieces(300, 2048, sigma)) == 2
  monkeypatch.setattr(nx, "cpu_cores", lambda: 0)
  whole = jaxdp.epsilon(q, sigma, steps, delta)
  monkeypatch.setattr(nx, "cpu_cores", lambda: 2)
  np.testing.assert_array_equal(jaxdp.epsilon(q, sigma, steps, delta), whole)


@pytest.mark.slow
@pytest.mark.parametrize("sigma_lo", [0.05, 0.5], ids=["64-nodes", "40-nodes"])
def test_pieces_give_the_values_of_the_whole_chunk(monkeypatch, sigma_lo):
  q, sigma, steps, delta, eps = _batch(300, sigma_lo)

  def answers(cores):
    monkeypatch.setattr(nx, "cpu_cores", lambda: cores)
    with nx.x64():
      e, a = rdp_driver.run_chunked("epsilon", q, sigma, steps, delta, None, "improved",
                                    with_order=True)
      d = rdp_driver.run_chunked("delta", q, sigma, steps, eps, None, "improved")
    return e, a, d

  whole, split = answers(0), answers(2)
  assert len(rdp_driver._pieces(300, 2048, sigma)) == 2
  for w, s in zip(whole, split):
    np.testing.assert_array_equal(w, s)


def test_several_chunks_split_their_last_one_only_into_built_programs(monkeypatch):
  """A fresh process's first multi-chunk call pads its small last chunk
  (the 256 bucket's programs are not built); once a call has built them, the
  same call runs that chunk as pieces, with the same values."""
  n = 2048 + 300
  q, sigma, steps, delta, _ = _batch(n, 0.5)
  monkeypatch.setattr(nx, "cpu_cores", lambda: 2)
  monkeypatch.setattr(rdp_driver, "_built", set())
  plans, pieces = [], rdp_driver._pieces

  def spy(*args, **kwargs):
    out = pieces(*args, **kwargs)
    plans.append([size for _, size, _ in out])
    return out

  monkeypatch.setattr(rdp_driver, "_pieces", spy)
  first = jaxdp.epsilon(q, sigma, steps, delta)
  assert plans == [[2048, 2048]]
  jaxdp.epsilon(q[-300:], sigma[-300:], steps[-300:], delta[-300:])   # builds the 256 bucket
  assert plans[-1] == [256, 256]
  again = jaxdp.epsilon(q, sigma, steps, delta)
  assert plans[-1] == [2048, 256, 256]
  np.testing.assert_array_equal(again, first)

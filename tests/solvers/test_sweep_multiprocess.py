"""jaxdp.sweep under jax.distributed: two local CPU processes, one grid.

Each test launches two Python processes that call
``jax.distributed.initialize`` with a coordinator on 127.0.0.1 (a free port)
and then ``jaxdp.sweep.epsilon`` (RDP, default orders, so the pruned order
search runs chunk by chunk) and ``jaxdp.sweep.sigma`` on the same small grids,
read from .npy files the test writes. Every process must get back the whole
result, bitwise equal to the single-process sweep computed here, after each
computed a non-empty share of it.

Bounded time: every process has a wall-clock limit (``_LIMIT_S``), the
distributed runtime short initialization and heartbeat timeouts, and any
process still alive at the end of a test is killed (by its own pid) in a
``finally``. When one process never joins, or dies after joining, the other
must fail (non-zero exit, or the time limit is hit and reported), never hang
and never write a result.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from jaxdp import sweep
from jaxdp._src.solvers import sweep as sweep_impl

# tests/solvers/ -> the repository
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIMIT_S = 120.0  # per launch of the two processes
_EPS_CHUNK = 16   # 70 configurations → 5 chunks: process 0 gets 2, process 1 gets 3
_SIG_CHUNK = 4    # 15 configurations → 4 chunks: 2 each
_SIG_ORDERS = [2.0, 3, 4, 8, 16, 32, 64]

_WORKER = r"""
import json, os, sys
import numpy as np
import jax

addr, pid, folder, mode, init_s, beat_s = sys.argv[1:7]
pid = int(pid)
if mode == "never" and pid == 1:
  sys.exit("process 1: exiting before jax.distributed.initialize (as the test asks)")
print(f"process {pid}: joining", flush=True)
jax.distributed.initialize(addr, num_processes=2, process_id=pid,
                           initialization_timeout=int(init_s),
                           heartbeat_timeout_seconds=int(beat_s))
print(f"process {pid}: initialized, {len(jax.devices())} devices", flush=True)
if mode == "die" and pid == 1:
  os._exit(3)  # dies after joining, before the sweep

import jaxdp
from jaxdp import sweep
from jaxdp._src.kernels import rdp_driver as _api   # the modules sweep reads them from
from jaxdp._src.solvers import calibrate

# Count the configurations this process computes itself.
share = {"epsilon": 0, "sigma": 0}
run_chunked, cal_sigma = _api.run_chunked, calibrate.sigma
def counted_run(kind, q, *rest):
  share["epsilon"] += int(np.size(q))
  return run_chunked(kind, q, *rest)
def counted_sigma(target, *rest, **kw):
  share["sigma"] += int(np.size(target))
  return cal_sigma(target, *rest, **kw)
_api.run_chunked, calibrate.sigma = counted_run, counted_sigma

load = lambda name: np.load(os.path.join(folder, name + ".npy"))
eps = sweep.epsilon(load("q"), load("sigma"), load("steps"), 1e-5, chunk_size=int(load("eps_chunk")))
eps_share = share["epsilon"]  # (calibrate.sigma calls run_chunked too)
sig = sweep.sigma(load("target"), 1e-5, load("sig_q"), 500, orders=load("sig_orders"),
                  chunk_size=int(load("sig_chunk")))
np.save(os.path.join(folder, f"eps_{pid}.npy"), eps)
np.save(os.path.join(folder, f"sig_{pid}.npy"), sig)
with open(os.path.join(folder, f"share_{pid}.json"), "w") as f:
  json.dump(dict(share, epsilon=eps_share, process_count=jax.process_count(), process_index=jax.process_index()), f)
print(f"process {pid}: done", flush=True)
"""


def _free_port():
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  """The test's environment for the workers: CPU only, the same number of
  local devices as this process (so the per-process path matches the
  single-process reference), jaxdp importable from this checkout."""
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count="
                      f"{jax.local_device_count()}").strip()
  env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, env.get("PYTHONPATH")) if p)
  env["PYTHONUNBUFFERED"] = "1"
  return env


def _launch_pair(folder, mode, init_s, beat_s):
  """Runs the two processes; returns ([returncode or None on timeout], logs, seconds).

  Both are killed (by pid) if still alive at the limit or on any error.
  """
  addr = f"127.0.0.1:{_free_port()}"
  procs, logs = [], []
  start = time.monotonic()
  try:
    for pid in (0, 1):
      log = open(os.path.join(folder, f"log_{pid}.txt"), "w+")
      logs.append(log)
      procs.append(subprocess.Popen(
          [sys.executable, "-c", _WORKER, addr, str(pid), str(folder), mode, str(init_s),
           str(beat_s)], env=_env(), cwd=_REPO, stdout=log, stderr=subprocess.STDOUT))
    codes = []
    for p in procs:
      try:
        codes.append(p.wait(timeout=max(0.0, _LIMIT_S - (time.monotonic() - start))))
      except subprocess.TimeoutExpired:
        codes.append(None)  # reported as a timeout; killed below
    return codes, _read_logs(logs), time.monotonic() - start
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait(timeout=30)
    for log in logs:
      log.close()


def _read_logs(logs):
  out = []
  for log in logs:
    log.flush()
    log.seek(0)
    out.append(log.read()[-3000:])
  return out


def _grids():
  eps_grid = sweep.grid(q=np.geomspace(1e-4, 0.5, 5), sigma=np.linspace(0.4, 3.0, 7),
                        steps=[7, 700])
  sig_grid = sweep.grid(target=[0.5, 1.0, 2.0, 4.0, 8.0], q=[1e-3, 1e-2, 0.1])
  return eps_grid, sig_grid


def _write_inputs(folder):
  eps_grid, sig_grid = _grids()
  arrays = dict(q=eps_grid["q"], sigma=eps_grid["sigma"], steps=eps_grid["steps"],
                eps_chunk=np.array(_EPS_CHUNK), target=sig_grid["target"],
                sig_q=sig_grid["q"], sig_orders=np.array(_SIG_ORDERS),
                sig_chunk=np.array(_SIG_CHUNK))
  for name, value in arrays.items():
    np.save(os.path.join(folder, name + ".npy"), value)


def _needs_cpu():
  if jax.default_backend() != "cpu" or jax.process_count() != 1:
    pytest.skip("the single-process reference must run on this process's CPU devices")


@pytest.mark.parametrize("n, size, count", [(70, 16, 2), (15, 4, 2), (1, 4, 3), (0, 8, 2),
                                            (4096 * 7 + 5, 4096, 4), (10, 1, 10), (3, 1, 8)])
def test_blocks_partition_whole_chunks(n, size, count):
  """The split every process derives on its own: contiguous, whole chunks,
  covering the grid once, shares within one chunk of each other."""
  blocks = [sweep_impl._block(n, size, p, count) for p in range(count)]
  assert blocks[0][0] == 0 and blocks[-1][1] == n
  assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
  assert all(lo % size == 0 and (hi % size == 0 or hi == n) for lo, hi in blocks)
  chunks = [-(-(hi - lo) // size) for lo, hi in blocks]
  assert max(chunks) - min(chunks) <= 1 and sum(chunks) == -(-n // size)
  assert sweep_impl._block(n, size, 0, 1) == (0, n)


def test_single_process_unchanged_and_validated():
  q, s = np.array([0.01, 0.02, 0.05]), np.array([0.7, 1.0, 2.0])
  orders = np.array(_SIG_ORDERS)
  a = sweep.epsilon(q, s, 100, 1e-5, orders=orders, chunk_size=2)
  b = sweep.epsilon(q, s, 100, 1e-5, orders=orders, chunk_size=2, collective=False)
  np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match="chunk_size"):
    sweep.epsilon(q, s, 100, 1e-5, orders=orders, chunk_size=-4)
  with pytest.raises(ValueError, match="chunk_size"):
    sweep.sigma(1.0, 1e-5, q, 100, orders=orders, chunk_size=2.5)
  with pytest.raises(ValueError, match="devices"):
    sweep.mesh_sharding([])


def test_two_processes_gather_the_single_process_result(tmp_path):
  _needs_cpu()
  _write_inputs(tmp_path)
  eps_grid, sig_grid = _grids()
  # The single-process reference (also fills the persistent compilation
  # cache that the workers inherit through JAX_COMPILATION_CACHE_DIR).
  ref_eps = sweep.epsilon(eps_grid["q"], eps_grid["sigma"], eps_grid["steps"], 1e-5,
                          chunk_size=_EPS_CHUNK)
  ref_sig = sweep.sigma(sig_grid["target"], 1e-5, sig_grid["q"], 500,
                        orders=np.array(_SIG_ORDERS), chunk_size=_SIG_CHUNK)
  assert ref_eps.shape == (5, 7, 2) and ref_sig.shape == (5, 3)
  assert np.all(np.isfinite(ref_eps)) and np.all(np.isfinite(ref_sig))

  codes, logs, seconds = _launch_pair(tmp_path, "ok", init_s=60, beat_s=30)
  assert codes == [0, 0], (f"codes {codes} after {seconds:.0f}s (None: killed at the "
                           f"{_LIMIT_S:.0f}s limit)\n--- process 0\n{logs[0]}\n"
                           f"--- process 1\n{logs[1]}")
  shares = []
  for pid in (0, 1):
    eps = np.load(tmp_path / f"eps_{pid}.npy")
    sig = np.load(tmp_path / f"sig_{pid}.npy")
    assert eps.dtype == np.float64 and sig.dtype == np.float64
    assert eps.shape == ref_eps.shape and sig.shape == ref_sig.shape
    # Bitwise: the same float64 bit patterns (NaN-safe, sign-of-zero-safe).
    np.testing.assert_array_equal(eps.view(np.int64), ref_eps.view(np.int64),
                                  err_msg=f"epsilon of process {pid}")
    np.testing.assert_array_equal(sig.view(np.int64), ref_sig.view(np.int64),
                                  err_msg=f"sigma of process {pid}")
    shares.append(json.loads((tmp_path / f"share_{pid}.json").read_text()))
  assert [s["process_count"] for s in shares] == [2, 2]
  assert [s["process_index"] for s in shares] == [0, 1]
  # Each process computed a contiguous block of whole chunks, not the whole grid.
  assert [s["epsilon"] for s in shares] == [2 * _EPS_CHUNK, ref_eps.size - 2 * _EPS_CHUNK]
  assert [s["sigma"] for s in shares] == [2 * _SIG_CHUNK, ref_sig.size - 2 * _SIG_CHUNK]


# Both failure modes run with -m slow ("die": process 1 leaves after joining,
# ~12 s; "never": it never joins and the coordinator's init timeout runs out);
# the default suite keeps the two-process success test.
@pytest.mark.parametrize("mode", [pytest.param("never", marks=pytest.mark.slow),
                                  pytest.param("die", marks=pytest.mark.slow)])
def test_a_missing_process_fails_clearly(tmp_path, mode):
  """Process 1 exits before joining ("never") or right after ("die"):
  process 0 must not hang, must exit non-zero (or be reported at the time
  limit) and must write no result."""
  _needs_cpu()
  _write_inputs(tmp_path)
  codes, logs, seconds = _launch_pair(tmp_path, mode, init_s=10, beat_s=10)
  detail = f"codes {codes} after {seconds:.0f}s\n--- process 0\n{logs[0]}\n--- process 1\n{logs[1]}"
  assert codes[1] not in (0, None), detail
  assert codes[0] != 0, detail  # non-zero exit, or None: killed at the limit
  assert seconds < _LIMIT_S + 35, detail
  assert not (tmp_path / "eps_0.npy").exists(), detail
  # Process 0 got as far as it should: into the join ("never"), or past it ("die").
  assert "process 0: joining" in logs[0], detail
  assert ("process 0: initialized" in logs[0]) == (mode == "die"), detail

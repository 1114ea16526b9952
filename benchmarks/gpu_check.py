"""GPU smoke check of this round's in-jit read-outs: run on a machine with an accelerator.

Runs on the default backend (GPU when present) and on the CPU in one process and compares:
  * accountant.rdp(): compose + epsilon inside jit (the chord-refined read-out,
    DEFAULT_ORDERS a superset of dp_accounting's), float32 and float64;
  * optax.dp_aggregate with a Poisson sampler and a budget: 30 jitted steps,
    the in-jit epsilon read-out against the host read-out;
  * jaxdp.epsilon (host, every real order) on a 100x100 grid, warm time per device.
Writes benchmarks/results/gpu_check.json (or $OUT/gpu_check.json).

  python benchmarks/gpu_check.py
"""

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdp
from jaxdp import accountant, events, sampling
from jaxdp._src.core import numerics as _numerics


def _acc_eps(dtype, dev):
  acc = accountant.rdp()
  ev = events.SampledGaussian(jnp.asarray(0.01, dtype), jnp.asarray(1.1, dtype))

  @jax.jit
  def run(ev):
    st = acc.compose(acc.init(), ev, count=1000)
    return acc.epsilon(st, 1e-5)

  with jax.default_device(dev):
    t0 = time.perf_counter()
    v = float(run(ev))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    v2 = float(jax.block_until_ready(run(ev)))
    warm = time.perf_counter() - t0
  assert v == v2
  return v, first, warm


def _optax_read(dev):
  smp = sampling.poisson(1000, 0.05, 1000)
  tx = jaxdp.optax.dp_aggregate(1.0, 1.1, sampler=smp, seed=0)
  grads = jnp.ones((smp.capacity if smp.capacity < 64 else 64, 3))
  with jax.default_device(dev):
    state = tx.init(jnp.zeros(3))

    @jax.jit
    def steps(state):
      def body(s, _):
        _, s = tx.update(grads, s, mask=jnp.ones(grads.shape[0], bool))
        return s, None
      s, _ = jax.lax.scan(body, state, None, length=30)
      return s, jaxdp.optax.epsilon(s, 1e-5)

    state, in_jit = steps(state)
    host = float(jaxdp.optax.epsilon(state, 1e-5))
  return float(in_jit), host


def main():
  out = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
         "jax": jax.__version__, "rows": []}
  devs = [("cpu", jax.devices("cpu")[0])]
  if jax.default_backend() != "cpu":
    devs.append((jax.default_backend(), jax.devices()[0]))
  host = float(jaxdp.epsilon(0.01, 1.1, 1000, 1e-5))
  out["host_epsilon_q0.01_s1.1_T1000"] = host
  for name, dev in devs:
    row = {"device": name}
    v32, f32, w32 = _acc_eps(jnp.float32, dev)
    row.update(acc_f32=v32, acc_f32_first_s=f32, acc_f32_warm_s=w32,
               acc_f32_rel_to_host=v32 / host - 1)
    with _numerics.x64():
      v64, f64, w64 = _acc_eps(jnp.float64, dev)
    row.update(acc_f64=v64, acc_f64_first_s=f64, acc_f64_warm_s=w64,
               acc_f64_rel_to_host=v64 / host - 1)
    try:
      in_jit, host_read = _optax_read(dev)
      row.update(optax_in_jit=in_jit, optax_host=host_read)
    except Exception as e:  # report, do not hide
      row.update(optax_error=repr(e)[:500])
    q = np.geomspace(1e-4, 0.1, 100)[:, None]
    s = np.linspace(0.6, 6, 100)
    with jax.default_device(dev):
      t0 = time.perf_counter()
      e1 = jaxdp.epsilon(q, s, 1000, 1e-5)
      row["grid_first_s"] = time.perf_counter() - t0
      t0 = time.perf_counter()
      e2 = jaxdp.epsilon(q, s, 1000, 1e-5)
      row["grid_warm_s"] = time.perf_counter() - t0
    row["grid_repeat_equal"] = bool(np.array_equal(e1, e2))
    row["grid_checksum"] = float(np.sum(e1))
    out["rows"].append(row)
    print(json.dumps(row), flush=True)
  dest = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "results")
  with open(os.path.join(dest, "gpu_check.json"), "w") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()

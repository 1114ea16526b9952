"""Large accounting sweeps (10⁶+ configurations), chunked and sharded over devices.

Every function takes broadcastable arrays (use :func:`grid` to build a
Cartesian product from 1-D axes), flattens them, and processes fixed-size
chunks: each chunk is laid out over a 1-D :class:`jax.sharding.Mesh` of all
``jax.devices()`` (or the ``devices`` given) with a
:class:`~jax.sharding.NamedSharding`, so the same code runs on one CPU, eight
GPUs or a TPU slice (in a multi-host job, call ``jax.distributed.initialize()``
first; each host then sees the global device list). Results come back as
float64 NumPy arrays with the broadcast shape. A tqdm progress bar is shown
with ``progress=True``.

* :func:`epsilon` / :func:`delta`: forward accounting (RDP kernels sharded
  over several devices; on the single default device, :func:`jaxdp.epsilon`'s
  path, which evaluates only the orders that can attain the minimum;
  ``accountant="pld"`` runs :func:`jaxdp.pld.epsilon` chunk by chunk).
* :func:`sigma` / :func:`steps` / :func:`sampling_rate`: the calibrations of
  :mod:`jaxdp.calibrate`, chunk by chunk, their solver kernels sharded.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import jax
import numpy as np

from jaxdp import _numerics as nx
from jaxdp import calibrate as _cal
from jaxdp import rdp

__all__ = ["grid", "epsilon", "delta", "sigma", "steps", "sampling_rate", "mesh_sharding"]

#: Configurations per device per chunk for the forward kernels.
PER_DEVICE_CHUNK = 4096
#: Configurations per host-level calibration call.
CALIBRATION_CHUNK = 65536


def grid(**axes):
  """Cartesian product of 1-D axes as broadcastable arrays.

  ``grid(q=[0.01, 0.02], sigma=np.linspace(0.5, 2, 100))`` returns a dict
  with ``q`` of shape (2, 1) and ``sigma`` of shape (1, 100), ready to pass
  to any function of this module (the result has shape (2, 100)).
  """
  names = list(axes)
  k = len(names)
  out = {}
  for i, name in enumerate(names):
    v = np.asarray(axes[name], np.float64).reshape(-1)
    shape = [1] * k
    shape[i] = v.size
    out[name] = v.reshape(shape)
  return out


def mesh_sharding(devices: Optional[Sequence] = None):
  """A 1-D ``NamedSharding`` over ``devices`` (default: all ``jax.devices()``)."""
  devices = list(jax.devices() if devices is None else devices)
  mesh = jax.sharding.Mesh(np.array(devices), ("configs",))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("configs"))


def _progress(total, enabled, desc):
  if not enabled:
    return None
  from tqdm.auto import tqdm
  return tqdm(total=total, desc=desc, unit="cfg", unit_scale=True)


@functools.lru_cache(maxsize=32)
def _forward_fn(kind, orders_key, method, sharding):
  orders = None if orders_key is None else np.asarray(orders_key)
  if kind == "epsilon":
    fn = lambda q, s, t, x: rdp.dpsgd_epsilon(q, s, t, x, orders, method)
  else:
    fn = lambda q, s, t, x: rdp.dpsgd_delta(q, s, t, x, orders)
  return jax.jit(fn, in_shardings=(sharding,) * 4, out_shardings=sharding)


def _flatten(*arrays):
  shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
  flat = [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1) for a in arrays]
  return shape, flat


def _forward(kind, q, sigma, steps, x, *, accountant, orders, method, devices, chunk_size,
             progress):
  from jaxdp import _api
  _api._validate_common(q, sigma, steps)
  if kind == "epsilon":
    nx.check_array("delta", x, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", x, low=0.0)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, **{"delta" if kind == "epsilon" else
                                                       "epsilon": x})
  if accountant not in ("rdp", "pld"):
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  orders = _api._validate_orders(orders)
  shape, flat = _flatten(q, sigma, steps, x)
  n = flat[0].size
  out = np.empty(n)
  bar = _progress(n, progress, kind)
  sharding = mesh_sharding(devices)
  ndev = sharding.mesh.devices.size
  size = (chunk_size or PER_DEVICE_CHUNK * ndev)
  size = -(-size // ndev) * ndev
  with nx.x64():
    if accountant == "pld" or (ndev == 1 and devices is None):
      # PLD, or RDP on one device: jaxdp.epsilon's path chunk by chunk (for
      # RDP it evaluates only the orders that can attain the minimum,
      # jaxdp._order_search; same values as the sharded kernels).
      if accountant == "pld":
        fn = _api.epsilon if kind == "epsilon" else _api.delta
        run = lambda parts: np.asarray(fn(*parts, accountant="pld")).reshape(-1)
      else:
        run = lambda parts: _api._run_chunked(kind, *parts, orders, method)
      for start in range(0, n, size):
        parts = [a[start:start + size] for a in flat]
        out[start:start + parts[0].size] = run(parts)
        if bar is not None:
          bar.update(parts[0].size)
    else:
      size = min(size, -(-max(n, 1) // ndev) * ndev)
      key = None if orders is None else tuple(float(o) for o in orders)
      fn = _forward_fn(kind, key, method, sharding)
      pads = (0.5, 1.0, 1.0, 0.5)
      for start in range(0, n, size):
        parts = [a[start:start + size] for a in flat]
        m = parts[0].size
        if m < size:
          parts = [np.concatenate([p, np.full(size - m, v)]) for p, v in zip(parts, pads)]
        res = fn(*(jax.device_put(p, sharding) for p in parts))
        out[start:start + m] = np.asarray(res)[:m]
        if bar is not None:
          bar.update(m)
  if bar is not None:
    bar.close()
  return out.reshape(shape)


def epsilon(q, sigma, steps, delta, *, accountant="rdp", orders=None, method="improved",
            devices=None, chunk_size=None, progress=False):
  """ε of DP-SGD over a large broadcast grid, sharded over ``devices``.

  Same values as :func:`jaxdp.epsilon` (same kernels, float64), computed in
  chunks of ``chunk_size`` (default ``PER_DEVICE_CHUNK`` per device) laid out
  over a 1-D device mesh.

  Returns:
    float64 NumPy array with the broadcast shape.
  """
  return _forward("epsilon", q, sigma, steps, delta, accountant=accountant, orders=orders,
                  method=method, devices=devices, chunk_size=chunk_size, progress=progress)


def delta(q, sigma, steps, epsilon, *, accountant="rdp", orders=None, devices=None,
          chunk_size=None, progress=False):
  """δ of DP-SGD over a large broadcast grid (see :func:`epsilon`)."""
  return _forward("delta", q, sigma, steps, epsilon, accountant=accountant, orders=orders,
                  method="improved", devices=devices, chunk_size=chunk_size, progress=progress)


def _calibrated(fn, names, arrays, kwargs, devices, chunk_size, progress, desc):
  shape = nx.check_same_shape(**dict(zip(names, arrays)))
  _, flat = _flatten(*arrays)
  n = flat[0].size
  out = np.empty(n)
  bar = _progress(n, progress, desc)
  size = chunk_size or CALIBRATION_CHUNK
  sharding = mesh_sharding(devices)
  with _cal._use_sharding(sharding if sharding.mesh.devices.size > 1 else None):
    for start in range(0, n, size):
      parts = [a[start:start + size] for a in flat]
      out[start:start + size] = np.asarray(fn(*parts, **kwargs), np.float64).reshape(-1)
      if bar is not None:
        bar.update(parts[0].size)
  if bar is not None:
    bar.close()
  return out.reshape(shape)


def sigma(target_epsilon, delta, q, steps, *, accountant="rdp", rtol=1e-6, orders=None,
          devices=None, chunk_size=None, progress=False):
  """Calibrated σ (:func:`jaxdp.calibrate.sigma`) over a large grid, chunked."""
  return _calibrated(_cal.sigma, ("target_epsilon", "delta", "q", "steps"),
                     (target_epsilon, delta, q, steps),
                     dict(accountant=accountant, rtol=rtol, orders=orders), devices, chunk_size,
                     progress, "sigma")


def steps(target_epsilon, delta, q, sigma, *, accountant="rdp", orders=None, devices=None,
          chunk_size=None, progress=False):
  """Largest steps (:func:`jaxdp.calibrate.steps`) over a large grid, chunked."""
  return _calibrated(_cal.steps, ("target_epsilon", "delta", "q", "sigma"),
                     (target_epsilon, delta, q, sigma),
                     dict(accountant=accountant, orders=orders), devices, chunk_size, progress,
                     "steps")


def sampling_rate(target_epsilon, delta, sigma, steps, *, accountant="rdp", rtol=1e-6,
                  orders=None, devices=None, chunk_size=None, progress=False):
  """Largest q (:func:`jaxdp.calibrate.sampling_rate`) over a large grid, chunked."""
  return _calibrated(_cal.sampling_rate, ("target_epsilon", "delta", "sigma", "steps"),
                     (target_epsilon, delta, sigma, steps),
                     dict(accountant=accountant, rtol=rtol, orders=orders), devices, chunk_size,
                     progress, "q")

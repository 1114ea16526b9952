"""Large accounting sweeps (10⁶+ configurations), chunked and sharded over devices
and processes.

Every function takes broadcastable arrays (use :func:`grid` to build a
Cartesian product from 1-D axes), flattens them, and processes fixed-size
chunks: each chunk is laid out over a 1-D :class:`jax.sharding.Mesh` of this
process's devices (``jax.local_devices()``, or the ``devices`` given) with a
:class:`~jax.sharding.NamedSharding`, so the same code runs on one CPU, eight
GPUs or a TPU host. Results come back as float64 NumPy arrays with the
broadcast shape. A tqdm progress bar (of this process's share) is shown with
``progress=True``.

Several processes (``jax.distributed``): after ``jax.distributed.initialize()``
every function of this module is a *collective*. Every process calls it with
the same full grid and gets back the full result:

* the flattened grid is cut into the same chunks as in a single process (the
  chunk length depends only on the grid size, ``chunk_size`` and the number of
  devices of one process), and process ``p`` of ``P`` computes the contiguous
  block of chunks ``[p·C/P, (p+1)·C/P)`` of the ``C`` chunks on its own
  devices;
* the per-process results, padded to equal length, are all-gathered with
  JAX's multi-controller runtime
  (:func:`jax.experimental.multihost_utils.process_allgather`) and
  concatenated in process order.

No scheduler of jaxdp's own is involved: the processes agree on the split
because each derives it from the same arguments, and the gather is JAX's.
Since every chunk is computed exactly as a single process with the same
number of local devices computes it, the gathered result is bitwise that
single process's result. Arguments are validated identically on every
process, so a bad grid raises the same ``ValueError`` everywhere before any
communication. A process that calls with a different grid, or not at all,
leaves the others waiting in the gather until JAX's distributed runtime
gives up (its heartbeat timeout, ``jax.distributed.initialize(...,
heartbeat_timeout_seconds=...)``); pass ``collective=False`` to compute the
whole grid in one process alone. On CPU the gather uses JAX's CPU collectives
(``jax_cpu_collectives_implementation``, gloo by default), so two local
processes on one machine work (README, "Scaling out").

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
from jax.experimental import multihost_utils
import numpy as np

from jaxdp._src.solvers import boundary_eval as _calibrate_boundary
from jaxdp._src.core import numerics as nx
from jaxdp._src.solvers import calibrate as _cal
from jaxdp._src.kernels import rdp

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
  """A 1-D ``NamedSharding`` over this process's devices.

  Args:
    devices: devices to lay chunks over, all addressable by this process
      (default: ``jax.local_devices()``, which in a single-process run are all
      of ``jax.devices()``).

  Returns:
    a :class:`jax.sharding.NamedSharding` over the mesh axis ``"configs"``.

  Raises:
    ValueError: when ``devices`` is empty or names a device of another process
      (each process computes its own share of a sweep; see the module
      docstring).
  """
  devices = list(jax.local_devices() if devices is None else devices)
  if not devices:
    raise ValueError("devices must name at least one device; found an empty sequence.")
  me = jax.process_index()
  foreign = [d for d in devices if d.process_index != me]
  if foreign:
    raise ValueError(f"devices must be addressable by this process (process {me}); found "
                     f"{foreign[0]} of process {foreign[0].process_index}. Under "
                     "jax.distributed each process lays its share over its own devices.")
  mesh = jax.sharding.Mesh(np.array(devices), ("configs",))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("configs"))


def _processes(collective):
  """(process index, process count) over which a sweep is split."""
  if not collective:
    return 0, 1
  return jax.process_index(), jax.process_count()


def _block(n, size, index, count):
  """Element range [lo, hi) of process ``index`` of ``count``: a contiguous
  block of whole chunks of length ``size`` (as balanced as chunks allow)."""
  chunks = -(-n // size) if n else 0
  first, last = index * chunks // count, (index + 1) * chunks // count
  return min(first * size, n), min(last * size, n)


def _join(collective):
  """Sets up the processes' collective context before the (possibly long and
  unequal) local work: a first collective must start on every process within
  the runtime's context-initialisation deadline (~30 s for gloo on CPU), so
  it is done here, while the processes are still in step, rather than at the
  final gather."""
  if _processes(collective)[1] > 1:
    with nx.x64():
      multihost_utils.process_allgather(np.zeros(1), tiled=False)


def _gather(local, n, size, collective):
  """The full flat result from every process's block (a collective when the
  sweep runs over several processes; otherwise ``local`` itself)."""
  _, count = _processes(collective)
  if count == 1:
    return local
  blocks = [_block(n, size, p, count) for p in range(count)]
  lengths = [hi - lo for lo, hi in blocks]
  width = max(lengths)
  if width == 0:  # an empty grid: nothing to exchange
    return local
  padded = np.full(width, np.nan)
  padded[:local.size] = local
  with nx.x64():  # float64 through the gather (no canonicalisation to float32)
    rows = np.asarray(multihost_utils.process_allgather(padded, tiled=False))
  if rows.shape != (count, width) or rows.dtype != np.float64:
    raise RuntimeError(f"process_allgather returned {rows.dtype}{rows.shape}; expected "
                       f"float64({count}, {width}).")
  return np.concatenate([rows[p, :lengths[p]] for p in range(count)])


def _progress(total, enabled, desc):
  if not enabled:
    return None
  from tqdm.auto import tqdm
  return tqdm(total=total, desc=desc, unit="cfg", unit_scale=True)


@functools.lru_cache(maxsize=32)
def _forward_fn(kind, orders_key, method, sharding):
  orders = None if orders_key is None else np.asarray(orders_key)
  if orders is None:  # default: every real order α > 1, as jaxdp.epsilon
    from jaxdp._src.kernels import continuous_order as _continuous_order
    fn = lambda q, s, t, x: _continuous_order.minimum_over_all_orders(kind, method, q, s, t, x)
  elif kind == "epsilon":
    fn = lambda q, s, t, x: rdp.dpsgd_epsilon(q, s, t, x, orders, method)
  else:
    fn = lambda q, s, t, x: rdp.dpsgd_delta(q, s, t, x, orders)
  return jax.jit(fn, in_shardings=(sharding,) * 4, out_shardings=sharding)


def _flatten(*arrays):
  shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
  flat = [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1) for a in arrays]
  return shape, flat


def _forward(kind, q, sigma, steps, x, *, accountant, orders, method, devices, chunk_size,
             progress, collective):
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_driver as _api  # pylint: disable=g-import-not-at-top
  _api.validate_rate_inputs(q, sigma, steps)
  if kind == "epsilon":
    nx.check_array("delta", x, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", x, low=0.0)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, **{"delta" if kind == "epsilon" else
                                                       "epsilon": x})
  if accountant not in ("rdp", "pld"):
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  orders = _api.validate_orders(orders)
  shape, flat = _flatten(q, sigma, steps, x)
  n = flat[0].size
  sharding = mesh_sharding(devices)
  ndev = sharding.mesh.devices.size
  size = chunk_size or PER_DEVICE_CHUNK * ndev
  nx.check_array("chunk_size", size, low=1.0, integer=True)
  size = -(-int(size) // ndev) * ndev
  pruned = accountant == "pld" or (ndev == 1 and devices is None)
  if not pruned:
    size = min(size, -(-max(n, 1) // ndev) * ndev)
  # This process's block of whole chunks (all of them in a single process).
  lo, hi = _block(n, size, *_processes(collective))
  _join(collective)
  local = np.empty(hi - lo)
  bar = _progress(hi - lo, progress, kind)
  with nx.x64():
    if pruned:
      # PLD, or RDP on one device: jaxdp.epsilon's path chunk by chunk (for
      # RDP it evaluates only the orders that can attain the minimum,
      # jaxdp._src.kernels.order_search; same values as the sharded kernels).
      if accountant == "pld":
        fn = rate.epsilon if kind == "epsilon" else rate.delta
        run = lambda parts: np.asarray(fn(*parts, accountant="pld")).reshape(-1)
      else:
        run = lambda parts: _api.run_chunked(kind, *parts, orders, method)
      for start in range(lo, hi, size):
        parts = [a[start:min(start + size, hi)] for a in flat]
        local[start - lo:start - lo + parts[0].size] = run(parts)
        if bar is not None:
          bar.update(parts[0].size)
    else:
      key = None if orders is None else tuple(float(o) for o in orders)
      fn = _forward_fn(kind, key, method, sharding)
      pads = (0.5, 1.0, 1.0, 0.5)
      for start in range(lo, hi, size):
        parts = [a[start:min(start + size, hi)] for a in flat]
        m = parts[0].size
        if m < size:
          parts = [np.concatenate([p, np.full(size - m, v)]) for p, v in zip(parts, pads)]
        res = fn(*(jax.device_put(p, sharding) for p in parts))
        local[start - lo:start - lo + m] = np.asarray(res)[:m]
        if bar is not None:
          bar.update(m)
  if bar is not None:
    bar.close()
  return _gather(local, n, size, collective).reshape(shape)


_COMMON_ARGS = """
    devices: devices of this process to shard each chunk over (default
      ``jax.local_devices()``).
    chunk_size: configurations per chunk (default per function, see the
      module constants). Under ``jax.distributed`` the chunk is also the unit
      of work handed to a process.
    progress: show a tqdm bar of this process's share.
    collective: under ``jax.distributed`` (more than one process), split the
      grid over the processes and all-gather the result, so every process
      must make the same call (default). ``False``: this process computes the
      whole grid alone. Ignored in a single-process run.
"""


def _doc(fn):
  """Fills the shared argument descriptions into ``fn``'s docstring."""
  if fn.__doc__:  # None under python -OO
    fn.__doc__ = fn.__doc__.replace("    __COMMON__\n", _COMMON_ARGS.lstrip("\n"))
  return fn


@_doc
def epsilon(q, sigma, steps, delta, *, accountant="rdp", orders=None, method="improved",
            devices=None, chunk_size=None, progress=False, collective=True):
  """ε of DP-SGD over a large broadcast grid, sharded over devices and processes.

  Same values as :func:`jaxdp.epsilon` (same kernels, float64), computed in
  chunks of ``chunk_size`` (default ``PER_DEVICE_CHUNK`` per device) laid out
  over a 1-D device mesh; under ``jax.distributed`` each process computes a
  contiguous block of chunks and the blocks are all-gathered (module
  docstring).

  Args:
    q: sampling rate(s) in [0, 1].
    sigma: noise multiplier(s) > 0.
    steps: number(s) of steps, whole numbers ≥ 0.
    delta: δ in (0, 1).
    accountant: "rdp" or "pld" (see :func:`jaxdp.epsilon`).
    orders: RDP orders (default None: every real order α > 1, as
      :func:`jaxdp.epsilon`).
    method: RDP→(ε, δ) conversion, "improved" or "classic".
    __COMMON__

  Returns:
    float64 NumPy array with the broadcast shape (the full grid on every
    process).

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  return _forward("epsilon", q, sigma, steps, delta, accountant=accountant, orders=orders,
                  method=method, devices=devices, chunk_size=chunk_size, progress=progress,
                  collective=collective)


@_doc
def delta(q, sigma, steps, epsilon, *, accountant="rdp", orders=None, devices=None,
          chunk_size=None, progress=False, collective=True):
  """δ of DP-SGD over a large broadcast grid (see :func:`epsilon`).

  Args:
    q, sigma, steps: as for :func:`epsilon`.
    epsilon: ε ≥ 0.
    accountant, orders: as for :func:`epsilon`.
    __COMMON__

  Returns:
    float64 NumPy array with the broadcast shape (the full grid on every
    process).

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  return _forward("delta", q, sigma, steps, epsilon, accountant=accountant, orders=orders,
                  method="improved", devices=devices, chunk_size=chunk_size, progress=progress,
                  collective=collective)


def _calibrated(fn, names, arrays, kwargs, devices, chunk_size, progress, desc, collective):
  shape = nx.check_same_shape(**dict(zip(names, arrays)))
  _, flat = _flatten(*arrays)
  n = flat[0].size
  size = chunk_size or CALIBRATION_CHUNK
  nx.check_array("chunk_size", size, low=1.0, integer=True)
  size = int(size)
  sharding = mesh_sharding(devices)
  # This process's block of whole chunks (all of them in a single process).
  lo, hi = _block(n, size, *_processes(collective))
  _join(collective)
  local = np.empty(hi - lo)
  bar = _progress(hi - lo, progress, desc)
  with _calibrate_boundary._use_sharding(sharding if sharding.mesh.devices.size > 1 else None):
    for start in range(lo, hi, size):
      parts = [a[start:min(start + size, hi)] for a in flat]
      m = parts[0].size
      local[start - lo:start - lo + m] = np.asarray(fn(*parts, **kwargs), np.float64).reshape(-1)
      if bar is not None:
        bar.update(m)
  if bar is not None:
    bar.close()
  return _gather(local, n, size, collective).reshape(shape)


@_doc
def sigma(target_epsilon, delta, q, steps, *, accountant="rdp", rtol=1e-6, orders=None,
          devices=None, chunk_size=None, progress=False, collective=True):
  """Calibrated σ (:func:`jaxdp.calibrate.sigma`) over a large grid, chunked.

  Args:
    target_epsilon, delta, q, steps, accountant, rtol, orders: as for
      :func:`jaxdp.calibrate.sigma`, broadcast together.
    __COMMON__

  Returns:
    float64 NumPy array with the broadcast shape (the full grid on every
    process).

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  return _calibrated(_cal.sigma, ("target_epsilon", "delta", "q", "steps"),
                     (target_epsilon, delta, q, steps),
                     dict(accountant=accountant, rtol=rtol, orders=orders), devices, chunk_size,
                     progress, "sigma", collective)


@_doc
def steps(target_epsilon, delta, q, sigma, *, accountant="rdp", orders=None, devices=None,
          chunk_size=None, progress=False, collective=True):
  """Largest steps (:func:`jaxdp.calibrate.steps`) over a large grid, chunked.

  Args:
    target_epsilon, delta, q, sigma, accountant, orders: as for
      :func:`jaxdp.calibrate.steps`, broadcast together.
    __COMMON__

  Returns:
    int64 NumPy array with the broadcast shape (the full grid on every
    process), in [0, :data:`jaxdp.calibrate.MAX_STEPS`] (2**53 where every
    number of steps fits), as :func:`jaxdp.calibrate.steps`.

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  # Gathered as float64 (exact for whole numbers up to 2**53), returned as int64.
  return _cal._as_steps(_calibrated(_cal.steps, ("target_epsilon", "delta", "q", "sigma"),
                                    (target_epsilon, delta, q, sigma),
                                    dict(accountant=accountant, orders=orders), devices,
                                    chunk_size, progress, "steps", collective))


@_doc
def sampling_rate(target_epsilon, delta, sigma, steps, *, accountant="rdp", rtol=1e-6,
                  orders=None, devices=None, chunk_size=None, progress=False, collective=True):
  """Largest q (:func:`jaxdp.calibrate.sampling_rate`) over a large grid, chunked.

  Args:
    target_epsilon, delta, sigma, steps, accountant, rtol, orders: as for
      :func:`jaxdp.calibrate.sampling_rate`, broadcast together.
    __COMMON__

  Returns:
    float64 NumPy array with the broadcast shape (the full grid on every
    process).

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  return _calibrated(_cal.sampling_rate, ("target_epsilon", "delta", "sigma", "steps"),
                     (target_epsilon, delta, sigma, steps),
                     dict(accountant=accountant, rtol=rtol, orders=orders), devices, chunk_size,
                     progress, "q", collective)

"""Test configuration.

XLA compilation dominates this suite's run time (the RDP kernels are large
programs), so the tests share a persistent compilation cache: programs
compiled by one test file, or by a notebook kernel started from the tests,
are reused by the others. This only affects the test process (and the
notebook kernels it spawns), never a user's configuration.
"""

import os
import sys
import tempfile

# Soundness guards (jaxdp/_src/kernels/guards.py) raise instead of falling back in tests:
# a violated guard is a bug that the suite must report.
os.environ.setdefault("JAXDP_STRICT_GUARDS", "1")

_CACHE = os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "jaxdp-test-jax-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
# jaxdp's own executables (jaxdp._src.core.persist) go beside it, not into the
# user's ~/.cache.
os.environ.setdefault("JAXDP_CACHE_DIR", os.path.join(tempfile.gettempdir(), "jaxdp-test-cache"))

sys.path.insert(0, os.path.dirname(__file__))  # tests/reference.py
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # `from tests import ...`

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

import pytest  # noqa: E402


def _drop_compiled_programs():
  jax.clear_caches()
  from jaxdp._src.core import persist
  persist.clear_memory()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drops JAX's in-memory compiled programs after each test module.

  One pytest process compiles a great many XLA programs; each keeps memory
  mappings alive, and the process once crashed inside LLVM ("Cannot allocate
  memory", vm.max_map_count is 65530) about halfway through the suite.  The
  persistent compilation cache above keeps re-compilation cheap (keeping the
  programs until a worker's footprint grew large instead saved nothing
  measurable on a cold run: 1236 s against 1202 s).
  """
  yield
  _drop_compiled_programs()
  from jaxdp._src.accounting import sampler_forward
  sampler_forward._event_curve.cache_clear()


@pytest.fixture
def cold_programs(monkeypatch):
  """For tests asserting that nothing is compiled: no program in memory and
  both persistent caches (JAX's and jaxdp's) off, so that any compiled path
  taken compiles, whatever ran before."""
  saved = os.environ.get("JAXDP_CACHE_DIR")
  _drop_compiled_programs()
  monkeypatch.setenv("JAXDP_CACHE_DIR", "off")
  jax.config.update("jax_enable_compilation_cache", False)

  def warm_again():   # the caches back on, for a test's compiled part
    jax.config.update("jax_enable_compilation_cache", True)
    if saved is not None:
      monkeypatch.setenv("JAXDP_CACHE_DIR", saved)

  yield warm_again
  warm_again()


@pytest.fixture
def record_compilations():
  """A context manager collecting the durations of the XLA backend
  compilations made inside its block: ``with record_compilations() as c:``."""
  import contextlib  # pylint: disable=g-import-not-at-top
  from jax import monitoring  # pylint: disable=g-import-not-at-top

  @contextlib.contextmanager
  def record():
    durations = []

    def listener(event, duration, **_):
      if event == "/jax/core/compile/backend_compile_duration":
        durations.append(duration)

    monitoring.register_event_duration_secs_listener(listener)
    try:
      yield durations
    finally:
      monitoring.unregister_event_duration_listener(listener)

  return record


@pytest.fixture(autouse=True)
def _fresh_host_questions():
  """Every test starts as a fresh process does: its first few small RDP
  questions are answered on the host (jaxdp._src.kernels.rdp_driver._host_turn), so a test's
  path does not depend on the tests that ran before it."""
  from jaxdp._src.kernels import rdp_driver as _rdp_driver
  _rdp_driver._host_questions.left = _rdp_driver._HOST_QUESTIONS
  from jaxdp._src.solvers import boundary_eval as _boundary_eval
  _boundary_eval._host_rounds.left = _boundary_eval._HOST_ROUNDS
  # The public RDP kernel's eager calls run the compiled kernel here, as
  # inside a user's jit: the tests of jaxdp.rdp.sampled_gaussian keep testing
  # the program that jitted code runs. Its host answers (the first eager
  # calls of a process) are tested in tests/kernels/test_rdp_eager.py.
  from jaxdp._src.kernels import rdp_eager as _rdp_eager
  _rdp_eager._host_calls.left = 0
  # Likewise the one-step profile's (tests/kernels/test_profiles_eager.py).
  from jaxdp._src.kernels import profiles_eager as _profiles_eager
  _profiles_eager._host_calls.left = 0
  # And the RDP accountant's read-out (tests/accounting/test_rdp_readout.py).
  from jaxdp._src.accounting import rdp_readout as _rdp_readout
  _rdp_readout._host_reads.left = 0
  # No trade-off profile kept from another test (a test that patches the PLD
  # path must compute, not read a profile computed before).
  from jaxdp._src.accounting import tradeoff_dpsgd as _tradeoff_dpsgd
  _tradeoff_dpsgd.clear_memo()
  yield


# Opt-in compile report (issue 37: the suite is compile-bound): with
# JAXDP_TEST_COMPILE_LOG=DIR, every worker writes DIR/compile-<worker>.json,
# the seconds XLA spent compiling (backend compilation, lowering and tracing)
# during each test and the number of backend compilations, and
# DIR/programs-<worker>.json the count and seconds per program name.
_COMPILE_LOG = os.environ.get("JAXDP_TEST_COMPILE_LOG")
_compile_seconds = {}
_program_seconds = {}
_current_test = ["<collection>"]

if _COMPILE_LOG:
  import jax.monitoring  # noqa: E402

  def _on_duration(event, duration, fun_name=None, **_):
    if event.startswith("/jax/core/compile/") or event.startswith("/jax/compilation_cache/"):
      row = _compile_seconds.setdefault(_current_test[0], {})
      row[event] = row.get(event, 0.0) + duration
      if event == "/jax/core/compile/backend_compile_duration":
        row["compilations"] = row.get("compilations", 0) + 1
        # Per program name too (e.g. "jit(chunk_quadrature)"): [count, seconds].
        prog = _program_seconds.setdefault(str(fun_name), [0, 0.0])
        prog[0] += 1
        prog[1] += duration

  jax.monitoring.register_event_duration_secs_listener(_on_duration)

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    _current_test[0] = item.nodeid
    yield
    _current_test[0] = "<between tests>"

  def pytest_sessionfinish(session):  # pylint: disable=unused-argument
    import json  # pylint: disable=g-import-not-at-top
    os.makedirs(_COMPILE_LOG, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(_COMPILE_LOG, f"compile-{worker}.json"), "w") as f:
      json.dump(_compile_seconds, f, indent=0)
    with open(os.path.join(_COMPILE_LOG, f"programs-{worker}.json"), "w") as f:
      json.dump(_program_seconds, f, indent=0)

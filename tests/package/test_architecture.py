"""The package's shape is a checked contract (docs/architecture.md).

* the import-linter contracts of ``pyproject.toml`` hold: the layers of
  ``jaxdp/_src`` point one way (imports inside functions included) and the
  implementation never imports a public facade; no import is ignored;
* no import cycle anywhere in the package (grimp's graph, which includes
  imports made inside functions);
* every public name the API reference documents imports from its documented
  path, and the facades' classes and functions keep their public module;
* the mechanism registry answers for every event class.
"""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys

import pytest

try:
  import tomllib
except ModuleNotFoundError:   # Python 3.10: import-linter depends on tomli there
  import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]   # tests/package/ -> the repository


def _pyproject():
  return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_import_linter_contracts_hold():
  code = ("from importlinter import configuration; configuration.configure(); "
          "from importlinter.application.use_cases import lint_imports; "
          "import sys; sys.exit(0 if lint_imports(cache_dir=None, no_logo=True) else 1)")
  run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       check=False)
  assert run.returncode == 0, run.stdout + run.stderr
  assert "2 kept, 0 broken" in run.stdout


def test_contracts_ignore_nothing_and_cover_every_layer():
  config = _pyproject()["tool"]["importlinter"]
  contracts = config["contracts"]
  assert all("ignore_imports" not in c for c in contracts)
  layers = next(c for c in contracts if c["type"] == "layers")
  assert layers["exhaustive"] is True
  src = ROOT / "jaxdp" / "_src"
  children = {p.stem for p in src.iterdir()
              if (p.is_dir() and (p / "__init__.py").exists())
              or (p.suffix == ".py" and p.stem != "__init__")}
  assert children == set(layers["layers"])


def _cycles(graph):
  """Strongly connected components of more than one module, by the same
  Tarjan as ``tools/arch_metrics.py`` (one implementation for both)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.spec_from_file_location("arch_metrics", ROOT / "tools" / "arch_metrics.py")
  metrics = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(metrics)
  return metrics._sccs(graph)  # pylint: disable=protected-access


def test_tarjan_finds_a_cycle():
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_anywhere():
  grimp = pytest.importorskip("grimp")
  graph = grimp.build_graph("jaxdp")
  succ = {m: {t for t in graph.find_modules_directly_imported_by(m) if t in graph.modules}
          for m in graph.modules}
  cycles = _cycles(succ)
  assert not cycles, cycles
  # in-function imports are part of the graph (the rate path imports the PLD kernel lazily)
  assert "jaxdp._src.pld.kernel" in succ["jaxdp._src.accounting.rate"]


def _documented_names():
  """(module, name or None) for every autodoc directive of docs/api."""
  out = []
  for rst in sorted((ROOT / "docs" / "api").glob("*.rst")):
    for directive, target in re.findall(r"^\.\. (auto\w+):: ([\w.]+)", rst.read_text(), re.M):
      if directive == "automodule":
        out.append((target, None))
      else:
        module, name = target.rsplit(".", 1)
        out.append((module, name))
  return out


@pytest.mark.parametrize("module, name", _documented_names())
def test_documented_public_name_imports(module, name):
  mod = importlib.import_module(module)
  if name is None:
    assert mod.__all__, module
    for public in mod.__all__:
      assert hasattr(mod, public), f"{module}.{public}"
  else:
    assert hasattr(mod, name), f"{module}.{name}"


def test_public_classes_and_functions_keep_their_public_module():
  import jaxdp  # pylint: disable=import-outside-toplevel
  seen = 0
  for sub in jaxdp._SUBMODULES + ("mechanisms_continuous", "mechanisms_discrete"):  # pylint: disable=protected-access
    mod = importlib.import_module(f"jaxdp.{sub}")
    for name in mod.__all__:
      obj = getattr(mod, name)
      where = getattr(obj, "__module__", None)
      if isinstance(obj, type) or callable(obj):
        assert where is not None and not where.startswith("jaxdp._src"), f"jaxdp.{sub}.{name}: {where}"
        seen += 1
  assert seen > 100
  assert jaxdp.epsilon.__module__ == "jaxdp"
  assert repr(jaxdp.events.Gaussian(1.0)).startswith("Gaussian(")


def test_public_events_pickle_by_their_public_path():
  import pickle  # pylint: disable=import-outside-toplevel
  from jaxdp import events  # pylint: disable=import-outside-toplevel
  ev = events.SampledGaussian(0.01, 1.1)
  assert type(ev).__module__ == "jaxdp.events"
  assert pickle.loads(pickle.dumps(ev)) == ev


def test_registry_answers_for_every_event_class():
  import inspect  # pylint: disable=import-outside-toplevel
  from jaxdp._src import events as E  # pylint: disable=import-outside-toplevel
  from jaxdp._src.mechanisms import registry  # pylint: disable=import-outside-toplevel
  classes = [c for _, c in inspect.getmembers(E, inspect.isclass)
             if c.__module__ == E.__name__ and hasattr(c, "_fields")]
  table = registry.table()
  missing = [c.__name__ for c in classes if c not in table]
  assert not missing, missing
  for c in classes:
    assert table[c].rdp is not None, c.__name__   # every event has an RDP curve


def _facade_aliases(tree):
  """Names a test module binds to a public facade (``from jaxdp import pld``,
  ``import jaxdp.pld as p``), and whether it binds ``jaxdp`` itself."""
  import ast  # pylint: disable=import-outside-toplevel
  import jaxdp  # pylint: disable=import-outside-toplevel
  public = set(jaxdp._SUBMODULES) | {"mechanisms_continuous", "mechanisms_discrete"}  # pylint: disable=protected-access
  out = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "jaxdp":
      out.update({a.asname or a.name: a.name for a in node.names if a.name in public})
    elif isinstance(node, ast.Import):
      for a in node.names:
        parts = a.name.split(".")
        if a.asname and parts[0] == "jaxdp" and len(parts) == 2 and parts[1] in public:
          out[a.asname] = parts[1]
  return out


def test_no_test_monkeypatches_a_private_name_on_a_facade():
  """A patch on a facade's re-exported copy tests nothing: private names are
  patched in the module that reads them (docs/architecture.md)."""
  import ast  # pylint: disable=import-outside-toplevel
  bad = []
  for path in sorted((ROOT / "tests").rglob("*.py")):   # every layer's folder
    tree = ast.parse(path.read_text())
    aliases = _facade_aliases(tree)
    for node in ast.walk(tree):
      if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "setattr" and node.args):
        continue
      target = node.args[0]
      if isinstance(target, ast.Constant) and isinstance(target.value, str):
        parts = target.value.split(".")   # monkeypatch.setattr("jaxdp.pld._x", ...)
        if len(parts) >= 3 and parts[0] == "jaxdp" and parts[1] != "_src":
          bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
      elif isinstance(target, ast.Name) and (target.id in aliases or target.id == "jaxdp"):
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
      elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and target.value.id == "jaxdp"):
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
  assert not bad, bad


def test_tests_follow_the_layers():
  """The test tree mirrors jaxdp/_src (docs/architecture.md): each folder of
  tests/ is a layer of the contract or ``package`` (the whole package's
  checks); only conftest.py and the shared references stay at the top. With
  no ``__init__.py``, pytest imports test files by their base name, which
  must therefore be unique across the tree."""
  layers = set(next(c for c in _pyproject()["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")["layers"])
  tests = ROOT / "tests"
  folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
  assert folders <= layers | {"package"}, sorted(folders - layers - {"package"})
  top = {p.name for p in tests.glob("*.py")}
  assert top <= {"conftest.py", "reference.py", "sampler_reference.py", "harness_reference.py"}, top
  names = [p.name for p in tests.rglob("test_*.py")]
  assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
  assert not list(tests.rglob("__init__.py"))

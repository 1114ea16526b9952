"""The documentation site builds with warnings as errors and documents every public name.

The site (``docs/``) is built once per test session, exactly as the README says
(``sphinx-build -W --keep-going -b html docs OUT``) but into a temporary folder,
in a subprocess so the build's environment does not leak into the other tests.
It takes about 10 s of CPU. Skipped when the ``docs`` extra (Sphinx, MyST-NB,
Furo, sphinx-mathjax-offline) is not installed; ``.[test]`` includes it.
Deselect with ``-m 'not slow and not docs'``.
"""

import importlib
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("furo")

import jaxdp  # noqa: E402

pytestmark = pytest.mark.docs

ROOT = pathlib.Path(__file__).resolve().parents[2]   # tests/package/ -> the repository
DOCS = ROOT / "docs"
GUIDE_PAGES = ("index", "getting_started", "choosing", "mathematics", "inloop", "cli",
               "benchmarks", "benchmark_results", "notebooks", "contributing", "api/index")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  """Builds the site once; returns the HTML folder (the build must be clean)."""
  out = tmp_path_factory.mktemp("docs") / "html"
  env = dict(os.environ)
  env.pop("COLUMNS", None)
  proc = subprocess.run(
      [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
       str(DOCS), str(out)],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
  if proc.returncode != 0:
    pytest.fail("sphinx-build -W failed (warnings are errors):\n" + proc.stderr[-6000:])
  return out


def _ids(html_file: pathlib.Path) -> set:
  return set(re.findall(r'id="([^"]+)"', html_file.read_text(encoding="utf-8")))


def _public_modules():
  return [n for n in jaxdp.__all__ if isinstance(getattr(jaxdp, n), type(jaxdp))]


def test_build_is_clean_and_complete(site):
  for page in GUIDE_PAGES:
    assert (site / f"{page}.html").is_file(), page
  index = (site / "index.html").read_text(encoding="utf-8")
  for page in GUIDE_PAGES[1:]:
    assert f'href="{page}.html' in index, f"{page} missing from the navigation"


def test_every_public_name_has_an_api_entry(site):
  ids = set()
  for page in (site / "api").glob("*.html"):
    ids |= _ids(page)
  missing = []
  modules = _public_modules()
  for name in jaxdp.__all__:
    anchor = f"module-jaxdp.{name}" if name in modules else f"jaxdp.{name}"
    if anchor not in ids:
      missing.append(anchor)
  for mod_name in modules:
    mod = importlib.import_module(f"jaxdp.{mod_name}")
    for name in mod.__all__:
      if f"jaxdp.{mod_name}.{name}" not in ids:
        missing.append(f"jaxdp.{mod_name}.{name}")
  assert not missing, f"public names without an API entry: {missing}"


def test_notebooks_rendered_from_stored_outputs(site):
  notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
  assert notebooks
  for nb_path in notebooks:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    stored_pngs = sum("image/png" in out.get("data", {})
                      for cell in nb["cells"] if cell["cell_type"] == "code"
                      for out in cell.get("outputs", []))
    html = (site / "notebooks" / f"{nb_path.stem}.html").read_text(encoding="utf-8")
    rendered_pngs = len(re.findall(r'<img[^>]+src="[^"]+\.png"', html))
    assert rendered_pngs == stored_pngs, nb_path.name


def test_math_renders_offline(site):
  html = (site / "mathematics.html").read_text(encoding="utf-8")
  assert 'class="math' in html
  scripts = re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', html, flags=re.I)
  assert scripts, "MathJax is not loaded"
  for src in scripts:
    assert not src.startswith(("http:", "https:", "//")), f"MathJax from the network: {src}"
    assert (site / src.split("?")[0]).is_file(), src


def test_cli_help_is_current(site):
  html = (site / "cli.html").read_text(encoding="utf-8")
  for cmd in ("", " epsilon", " delta", " calibrate", " sweep"):
    assert f"usage: jaxdp{cmd}" in html, cmd

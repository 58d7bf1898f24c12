"""The architecture as a test: layers import downward only, the core does no I/O, and faces
compute no money or time of their own (one cost model)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rackmath"
FACES = ("cli", "web", "plots")
# What each layer may import from rackmath (besides itself).
ALLOWED = {
    "core": {"core", "specs", "errors", "units"},
    "specs": {"specs", "errors", "units", "numbers", "userfiles"},
    # frames (results as tables) and progress (bars) are leaves: they import only errors
    "analyses": {"analyses", "core", "specs", "catalog", "errors", "units", "numbers", "frames", "progress"},
    # views turn analysis results into text and chart data for the faces
    "views": {"views", "analyses", "core", "specs", "catalog", "errors", "units", "numbers", "frames"},
    "catalog": {"catalog", "specs", "errors", "units", "userfiles"},
}
# Faces draw what analyses return: they may import the analyses, the typed specs, the
# catalog, the views (figure data, text, formatting) and the api, never rackmath.core. A face
# never imports another face, with one exception each: the CLI's --plot and the web's PNG
# buttons write files through rackmath.plots.
FACE_SHARED = {
    *("analyses", "views", "specs", "catalog", "errors", "units", "api"),
    *("numbers", "userfiles", "frames", "progress"),
}
FACE_ALLOWED = {
    "cli": FACE_SHARED | {"cli", "plots", "measure"},  # measure: `rackmath measure` runs the bench
    "web": FACE_SHARED | {"web", "plots"},
    "plots": FACE_SHARED | {"plots"},
}
IO_CALLS = {"print", "open", "input"}
# Unit conversions that belong in core functions (per hour, per day, per million tokens):
# seeing them in a face means a cost is being computed there.
FACE_FORBIDDEN_LITERALS = {3600, 86400}


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _rackmath_imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rackmath."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rackmath."):
                    found.add(alias.name.split(".")[1])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_downward_only(layer: str) -> None:
    offenders = {}
    for path in _modules(layer):
        bad = _rackmath_imports(ast.parse(path.read_text())) - ALLOWED[layer]
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not offenders, f"{layer}/ may import only {sorted(ALLOWED[layer])}: {offenders}"


def test_core_does_no_io() -> None:
    offenders = []
    for path in _modules("core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
                offenders.append(f"{path.name}:{node.lineno} {node.func.id}()")
    assert not offenders, "core/ is pure; move I/O to a face: " + ", ".join(offenders)


def test_faces_compute_no_costs_or_times() -> None:
    offenders = []
    for face in FACES:
        for path in _modules(face):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in FACE_FORBIDDEN_LITERALS:
                    offenders.append(f"{face}/{path.name}:{node.lineno} literal {node.value}")
    assert not offenders, "convert units in core/ and import the result: " + ", ".join(offenders)


# Known exceptions to the face rule, by module: this list must only shrink. explain_cmd.py
# (owned by the explain work) still calls rackmath.core.architecture for three figures of
# its text report; rackmath.analyses.catalog_facts already computes them (model_facts,
# decode_flops_per_token), so the exception goes once the command reads them from there.
KNOWN_FACE_EXCEPTIONS: dict[str, list[str]] = {}


def _face_offenders(face: str) -> dict[str, list[str]]:
    offenders = {}
    for path in _modules(face):
        bad = _rackmath_imports(ast.parse(path.read_text())) - FACE_ALLOWED[face]
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    return offenders


@pytest.mark.parametrize("face", FACES)
def test_faces_import_analyses_not_the_core_nor_other_faces(face: str) -> None:
    extra = {k: v for k, v in _face_offenders(face).items() if KNOWN_FACE_EXCEPTIONS.get(k) != v}
    assert not extra, f"{face}/ may import only {sorted(FACE_ALLOWED[face])}: {extra}"


def test_every_known_face_exception_is_still_needed() -> None:
    """An exception that no longer matches the code is removed from the list, not kept."""
    found = {k: v for face in FACES for k, v in _face_offenders(face).items()}
    stale = {k: v for k, v in KNOWN_FACE_EXCEPTIONS.items() if found.get(k) != v}
    assert not stale, f"remove from KNOWN_FACE_EXCEPTIONS: {stale}"


def test_the_layer_rules_catch_a_face_importing_the_core() -> None:
    tree = ast.parse("from rackmath.core import roofline\nimport rackmath.web.components\n")
    assert _rackmath_imports(tree) - FACE_ALLOWED["plots"] == {"core", "web"}


def test_plots_and_web_hold_no_numerical_sweeps() -> None:
    """Curves are computed in views/figures/: no geomspace/linspace/logspace in a face."""
    offenders = []
    for face in ("plots", "web"):
        for path in _modules(face):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in {"geomspace", "linspace", "logspace"}:
                    offenders.append(f"{face}/{path.name}:{node.lineno} {node.attr}")
    assert not offenders, "compute curves in rackmath.views.figures: " + ", ".join(offenders)


#: No module under src/rackmath may be longer than this (data files aside): split by responsibility.
MAX_MODULE_LINES = 600


def _over_limit(root: Path) -> dict[str, int]:
    """Every ``*.py`` below ``root`` longer than :data:`MAX_MODULE_LINES`, with its line count."""
    lengths = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))}
    return {name: n for name, n in lengths.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_the_line_limit() -> None:
    over = _over_limit(PACKAGE)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by responsibility): {over}"


def test_the_line_limit_finds_a_long_module_in_a_subpackage(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "data.yaml").write_text("x: 1\n" * (MAX_MODULE_LINES + 1))
    assert _over_limit(tmp_path) == {"pkg/long.py": MAX_MODULE_LINES + 1}


#: The two renderers of a FigureData, and the module that opens Matplotlib headless.
RENDERERS = {"plots/render_mpl.py", "plots/_files.py", "web/render_plotly.py"}
#: Plotly constructors of a chart (go.Figure as a type annotation is allowed anywhere).
PLOTLY_BUILDERS = {"Figure", "Scatter", "Bar", "Heatmap", "Box", "Histogram", "Pie", "Scattergl", "Layout"}


def _draws_a_chart(tree: ast.AST) -> list[int]:
    """Lines that import Matplotlib, or build Plotly traces, or call ``go.Figure(...)``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(n.split(".")[0] == "matplotlib" for n in names):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "go" and node.func.attr in PLOTLY_BUILDERS:
                lines.append(node.lineno)
    return lines


def test_every_chart_is_drawn_by_the_two_renderers_only() -> None:
    """A chart is one FigureData (rackmath.views.figures) drawn by Matplotlib and by Plotly;
    no other face module builds a chart of its own."""
    offenders = []
    for face in FACES:
        for path in _modules(face):
            name = str(path.relative_to(PACKAGE))
            if name not in RENDERERS:
                offenders += [f"{name}:{line}" for line in _draws_a_chart(ast.parse(path.read_text()))]
    assert not offenders, "draw a FigureData with render_mpl / render_plotly instead: " + ", ".join(offenders)


def test_the_chart_check_sees_a_page_drawing_its_own() -> None:
    tree = ast.parse("import matplotlib.pyplot as plt\nfig = go.Figure(go.Scatter(x=[1], y=[2]))\n")
    assert _draws_a_chart(tree) == [1, 2, 2]

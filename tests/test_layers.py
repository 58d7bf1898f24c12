"""The architecture as a test: layers import downward only, the core does no I/O, and faces
compute no money or time of their own (one cost model). Between modules: no import circle, no
private name crosses a module, every name is imported from the module that defines it (no
re-export facade), and the packages of analyses/ and views/ have empty ``__init__`` files."""

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


@pytest.mark.parametrize("layer", ["analyses", "core", "specs", "catalog"])
def test_the_layer_rules_catch_a_layer_below_the_views_importing_them(layer: str) -> None:
    """Views format results; nothing they format may import them back (a function-level import
    counts: the result would format itself)."""
    tree = ast.parse("def f():\n    from rackmath.views.fmt import si\n    return si\n")
    assert _rackmath_imports(tree) - ALLOWED[layer] == {"views"}


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
RENDERERS = {"plots/render_mpl.py", "plots/files.py", "web/render_plotly.py"}
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


# ---------------------------------------------------------------------------- between modules
# The import graph counts every import statement of a module: at the top, inside a function
# (a deferred import is a dependency all the same) and under ``if TYPE_CHECKING`` (the types
# of a signature are a dependency of its reader). A name taken from a package is an edge to
# the submodule it is (``from rackmath.core import roofline`` -> ``rackmath.core.roofline``).


def _module_names(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``*.py`` of ``src/package``."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _import_graph(src: Path, package: str) -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports, anywhere in the file."""
    mods = _module_names(src, package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = _imported_from(node, name, path.name == "__init__.py")
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base
                    edges.add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    edges.add(target)
        graph[name] = {e for e in edges if e in mods and e != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circle() -> None:
    circles = _circles(_import_graph(PACKAGE.parent, "rackmath"))
    assert not circles, f"modules that import each other (move the shared part down a module): {circles}"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_circle_check_finds_a_deferred_and_a_type_only_circle(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def f():\n    from pkg.a import x\n    return x\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n",
            "pkg/d.py": "from .c import C\n",
            "pkg/e.py": "from pkg import a\n",
        },
    )
    assert _circles(_import_graph(src, "pkg")) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_crossings(src: Path, package: str) -> list[str]:
    """``from x import _name`` and ``x._name`` where x is another module of the package, and any
    import from a private module (``pkg._common``) outside its own package."""
    mods = _module_names(src, package)
    found = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _imported_from(node, name, path.name == "__init__.py")
                if base not in mods:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in mods:
                        aliases[alias.asname or alias.name] = full
                    if base != name and (_is_private(alias.name) or _is_private(base.rpartition(".")[2])):
                        found.append(f"{name}:{node.lineno} imports {full}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in mods:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _is_private(node.attr)
            ):
                found.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module() -> None:
    """A name another module needs is public where it is defined (faces reading a private name
    of an analysis included)."""
    crossings = _private_crossings(PACKAGE.parent, "rackmath")
    assert not crossings, f"make the name public in its module, or move it: {crossings}"


def test_the_private_name_check_catches_an_import_an_attribute_and_a_private_module(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/analyses/__init__.py": "",
            "pkg/analyses/serving.py": "def _grid():\n    return 1\n\n\ndef grid():\n    return _grid()\n",
            "pkg/analyses/_common.py": "SHARED = 1\n",
            "pkg/cli/__init__.py": "",
            "pkg/cli/explain.py": (
                "from pkg.analyses.serving import _grid, grid\n"
                "from pkg.analyses import serving as s\n"
                "from pkg.analyses._common import SHARED\n"
                "x = s._grid() + s.grid() + _grid() + grid() + SHARED + len(__name__)\n"
            ),
        },
    )
    assert _private_crossings(src, "pkg") == [
        "pkg.cli.explain:1 imports pkg.analyses.serving._grid",
        "pkg.cli.explain:3 imports pkg.analyses._common.SHARED",
        "pkg.cli.explain:4 uses pkg.analyses.serving._grid",
    ]


def _definitions(path: Path) -> tuple[set[str], set[str]]:
    """(names a module defines, names it imports) at its top level (TYPE_CHECKING aside)."""
    defined: set[str] = set()
    imported: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom | ast.Import):
                imported.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If) and not (
                isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            ):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody)

    visit(ast.parse(path.read_text()).body)
    return defined, imported - defined


def _reexport_uses(src: Path, package: str, public: frozenset[str] = frozenset()) -> list[str]:
    """``from m import n`` (or ``alias_of_m.n``) where ``m`` only imported ``n`` from elsewhere:
    a re-export used as a facade. Modules in ``public`` are a deliberate API surface."""
    mods = _module_names(src, package)
    passed_on = {m: _definitions(p)[1] for m, p in mods.items() if m not in public}
    found = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _imported_from(node, name, path.name == "__init__.py")
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in mods:
                        aliases[alias.asname or alias.name] = full
                    elif alias.name in passed_on.get(base, ()):
                        found.append(f"{name}:{node.lineno} imports {alias.name} from {base}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in mods:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                module = aliases[node.value.id]
                if node.attr in passed_on.get(module, ()) and f"{module}.{node.attr}" not in mods:
                    found.append(f"{name}:{node.lineno} reads {node.attr} through {module}")
    return found


#: The deliberate public surface: ``import rackmath as rm; rm.decode(...)`` and rackmath.api.
PUBLIC_SURFACE = frozenset({"rackmath", "rackmath.api"})


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    uses = _reexport_uses(PACKAGE.parent, "rackmath", PUBLIC_SURFACE)
    assert not uses, f"import these from the module that defines them (no re-export facades): {uses}"


def test_the_facade_check_catches_a_package_and_a_module_passing_names_on(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "from pkg.core.roofline import step\n",
            "pkg/core/roofline.py": "def step():\n    return 1\n",
            "pkg/analyses/__init__.py": "",
            "pkg/analyses/search.py": (
                "from pkg.core.roofline import step\n\n\ndef search():\n    return step()\n"
            ),
            "pkg/cli/__init__.py": "",
            "pkg/cli/main.py": (
                "from pkg.core import step\n"
                "from pkg.analyses import search as srch\n"
                "from pkg.core.roofline import step as s2\n"
                "x = srch.step() + srch.search() + s2()\n"
            ),
        },
    )
    assert _reexport_uses(src, "pkg") == [
        "pkg.cli.main:1 imports step from pkg.core",
        "pkg.cli.main:4 reads step through pkg.analyses.search",
    ]


@pytest.mark.parametrize("package", ["analyses", "views"])
def test_the_feature_packages_have_empty_inits(package: str) -> None:
    """``analyses/*/__init__.py`` and ``views/**/__init__.py`` hold a docstring only: a caller
    imports the module that defines a name, never a package that gathers names."""
    full = [
        str(p.relative_to(PACKAGE))
        for p in sorted((PACKAGE / package).rglob("__init__.py"))
        if any(
            not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            for n in ast.parse(p.read_text()).body
        )
    ]
    assert not full, f"keep only a docstring in: {full}"


def _packages_graph(graph: dict[str, set[str]], root: str) -> dict[str, set[str]]:
    """The module graph folded onto the subpackages of ``root`` (``rackmath.analyses.serving``)."""

    def package(module: str) -> str | None:
        rest = module.removeprefix(root + ".")
        return f"{root}.{rest.split('.')[0]}" if module.startswith(root + ".") and "." in rest else None

    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if (a := package(module)) is not None:
            folded.setdefault(a, set()).update(b for t in targets if (b := package(t)) not in (None, a))
    return folded


def test_the_analysis_packages_depend_one_way() -> None:
    """serving <- deploy, economics, training, reality; kernels below serving: no two feature
    packages import each other, even through different modules."""
    packages = _packages_graph(_import_graph(PACKAGE.parent, "rackmath"), "rackmath.analyses")
    assert not _circles(packages), f"feature packages that import each other: {_circles(packages)}"


def test_the_package_check_sees_two_packages_importing_each_other(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/an/__init__.py": "",
            "pkg/an/one/__init__.py": "",
            "pkg/an/one/a.py": "from pkg.an.two import c\n",
            "pkg/an/one/b.py": "",
            "pkg/an/two/__init__.py": "",
            "pkg/an/two/c.py": "from pkg.an.one import b\n",
        },
    )
    packages = _packages_graph(_import_graph(src, "pkg"), "pkg.an")
    assert _circles(packages) == [["pkg.an.one", "pkg.an.two"]]


def _unlisted_modules(package_dir: Path) -> list[str]:
    """Modules of a package (subpackages included) that its README.md does not name."""
    readme = (package_dir / "README.md").read_text()
    missing = []
    for path in sorted(package_dir.rglob("*.py")):
        name = str(path.relative_to(package_dir))
        if path.name == "__init__.py" and path.parent == package_dir:
            continue
        if path.name == "__init__.py" and not any(
            not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            for n in ast.parse(path.read_text()).body
        ):
            continue  # a docstring-only __init__ is nothing to list
        if f"`{name}`" not in readme:
            missing.append(name)
    return missing


@pytest.mark.parametrize("package", sorted(p.parent.name for p in PACKAGE.glob("*/README.md")))
def test_every_package_readme_lists_every_module(package: str) -> None:
    missing = _unlisted_modules(PACKAGE / package)
    assert not missing, f"{package}/README.md: add a line on what each of these owns: {missing}"


def test_the_readme_check_finds_an_unlisted_module(tmp_path: Path) -> None:
    pkg = _write(
        tmp_path, {"README.md": "| `a.py` | a |\n", "__init__.py": '"""doc"""\n', "a.py": "", "sub/b.py": ""}
    )
    assert _unlisted_modules(pkg) == ["sub/b.py"]

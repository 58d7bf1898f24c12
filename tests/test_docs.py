"""Every command and Python snippet in README.md and docs/*.md runs, and the docs print
what they print now (``docs/render.py``; regenerate with ``python docs/render.py``).

One process renders every document in-process (``rackmath.cli.main.run``, no
subprocesses); a stale transcript fails with a diff naming the document. The mechanism
itself is tested on small documents written here.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("pandas")  # the notebooks page reads a sweep back with pandas

ROOT = Path(__file__).resolve().parent.parent

#: Blocks not run, per document: each states why in its directive (`--list` prints them).
#: Adding one means adding it here too, so the list stays short and seen.
EXPECTED_SKIPS = {
    "README.md": 2,  # ./dev demo / ./dev test (set-up, and this suite); docs/render.py itself
    "docs/architecture.md": 1,  # pytest and a line count
    "docs/calibration.md": 1,  # the full kernel refit (minutes; rewrites the catalog)
    "docs/notebooks.md": 2,  # pip install; a Dask scheduler on the network
}


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_render", ROOT / "docs" / "render.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


render = _render_module()
DOCS = [render._rel(p) for p in render.documents()]


def test_every_markdown_file_is_rendered_or_says_why() -> None:
    on_disk = {"README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))}
    assert set(DOCS) | set(render.NOT_RENDERED) == on_disk
    assert set(render.NOT_RENDERED) == {"docs/web.md"}


@pytest.mark.parametrize("doc", DOCS)
def test_the_doc_prints_what_its_commands_print(doc: str) -> None:
    """Each document is rendered by the worker that runs its own test, and only there (a
    module-wide rendering of every document ran once per pytest-xdist worker)."""
    fresh, report = render.render_document(ROOT / doc)
    assert len(report.skipped) == EXPECTED_SKIPS.get(doc, 0), report.skipped
    assert len(report.ran) >= len(report.skipped), report.ran  # a page runs what it shows
    current = (ROOT / doc).read_text(encoding="utf-8")
    if fresh != current:
        diff = "\n".join(
            list(
                difflib.unified_diff(
                    current.splitlines(), fresh.splitlines(), "written", "as run", lineterm=""
                )
            )[:40]
        )
        pytest.fail(f"{doc} is stale: run python docs/render.py\n{diff}")


def test_the_skip_list_is_short_and_says_why() -> None:
    """Read from the documents' ``skip`` directives, as the renderer parses them (the
    rendering test above checks that a run skips exactly these and runs at least as many)."""
    skips: dict[str, list[str]] = {}
    for doc in DOCS:
        for b in render.blocks((ROOT / doc).read_text(encoding="utf-8").split("\n")):
            reason = b.directive("skip")
            if reason is not None:
                skips.setdefault(doc, []).append(reason)
    assert {doc: len(s) for doc, s in skips.items()} == EXPECTED_SKIPS
    assert all(len(why) > 20 for s in skips.values() for why in s)


# --- the mechanism, on small documents ------------------------------------------------

DOC = """# A page

<!-- docs: until ^  searched -->
```console
$ rackmath plan llama-3.1-70b --traffic 1000 --hardware h100-hgx \\
    --max-chips 16
stale output that the run replaces
```

```console
$ rackmath plan llama-3.1-8b --traffic fast
```

<!-- docs: write spec.yaml -->
```yaml
models: [llama-3.1-8b]
systems: [h100-hgx]
batch: [1]
context: [100000000]
```

```python
import yaml

print(yaml.safe_load(open("spec.yaml"))["models"])
6 * 7
```

<!-- docs: output -->
```
old
```
"""


def test_a_transcript_is_rewritten_from_a_run(tmp_path: Path) -> None:
    fresh, report = render.render_document(tmp_path / "page.md", DOC)
    lines = fresh.splitlines()
    i = lines.index("$ rackmath plan llama-3.1-70b --traffic 1000 --hardware h100-hgx \\")
    assert lines[i + 1] == "    --max-chips 16"  # the command as typed, continuation kept
    assert lines[i + 2].startswith("rackmath plan llama-3.1-70b: 1,000 output tokens/s")
    assert lines[i + 3] == "..."  # `until` cut the rest and marked it
    assert "stale output" not in fresh
    assert "error: --traffic: got 'fast'; allowed: a number such as 1024" in fresh
    assert "(exit code 1)" in fresh
    assert "['llama-3.1-8b']\n42\n```" in fresh  # printed, then the last line's value
    assert len(report.ran) == 4 and not report.skipped
    again, _ = render.render_document(tmp_path / "page.md", fresh)
    assert again == fresh  # rendering is a fixed point: --check passes right after a render


def test_check_fails_on_a_stale_doc_and_render_fixes_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(DOC, encoding="utf-8")
    assert render.main(["--check", str(page)]) == 1
    assert page.read_text(encoding="utf-8") == DOC  # --check writes nothing
    assert render.main([str(page)]) == 0
    assert render.main(["--check", str(page)]) == 0


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("```bash\nrackmath models\n```\n", "make it a `console` transcript"),
        ("```\n$ rackmath models\n```\n", "make it a `console` transcript"),
        ("<!-- docs: skip -->\n```bash\nx\n```\n", "`skip` needs a reason"),
        ("<!-- docs: tail -->\n```console\n$ rackmath models\n```\n", "wants a number of lines"),
        ("<!-- docs: sideways 3 -->\n```console\n$ rackmath models\n```\n", "unknown directive 'sideways'"),
        ("```console\n$ ls -la\n```\n", "runs `rackmath` commands only"),
        ("```python\n1 / 0\n```\n", "raises ZeroDivisionError"),
        ("<!-- docs: from ^nothing-matches -->\n```console\n$ rackmath models\n```\n", "no line"),
        ("```console\n$ rackmath models\n", "never closed"),
    ],
)
def test_a_broken_block_is_an_error_naming_its_line(tmp_path: Path, doc: str, message: str) -> None:
    with pytest.raises(render.DocError) as err:
        render.render_document(tmp_path / "page.md", "# Title\n\n" + doc)
    assert message in str(err.value)


def test_excerpts_mark_every_cut() -> None:
    lines = ["a", "b", "c", "d", "e", "f"]
    assert render.excerpt(lines, [("head", "2")]) == ["a", "b", "..."]
    assert render.excerpt(lines, [("tail", "2")]) == ["...", "e", "f"]
    assert render.excerpt(lines, [("grep", "[bdf]")]) == ["...", "b", "...", "d", "...", "f"]
    assert render.excerpt(lines, [("from", "c"), ("until", "e")]) == ["...", "c", "d", "..."]
    assert render.excerpt(lines, [("omit", "b .. e")]) == ["a", "...", "e", "f"]
    assert render.excerpt(lines, []) == lines

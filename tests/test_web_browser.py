"""End-to-end tests of the web explorer in headless Chromium (Playwright + the system browser).

A pytest fixture starts ``streamlit run`` (the same command line as ``rackmath web``) on a
free localhost port, waits for its health endpoint, and stops it afterwards. Each test
opens a page, changes a control, and checks that the numbers and the plot change and that
no error or traceback shows. Screenshots go to ``artifacts/screenshots/`` (gitignored).

Chromium is the system's (``RACKMATH_CHROMIUM``, else ``chromium`` on PATH); ``./dev test``
installs Debian's package when it is missing. Without a browser these tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("streamlit", reason="needs the web extra: pip install 'rackmath[web]'")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="needs the browser extra: pip install 'rackmath[browser]'"
)

from rackmath import explain  # noqa: E402
from rackmath.api import deployment  # noqa: E402
from rackmath.catalog import loader as catalog  # noqa: E402
from rackmath.cli.web_cmds import streamlit_command  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("RACKMATH_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
SERVER_START_TIMEOUT_S = 45
UI_TIMEOUT_MS = 40_000

if not CHROMIUM or not Path(CHROMIUM).exists():
    pytest.skip(
        "no Chromium binary: set RACKMATH_CHROMIUM or install Debian's chromium (./dev test does)",
        allow_module_level=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            streamlit_command(port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RACKMATH_DEBUG": ""},
        )
        url = f"http://localhost:{port}"
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        try:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()}")
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"streamlit did not answer within {SERVER_START_TIMEOUT_S} s:\n{log.read_text()}"
                    )
                time.sleep(0.25)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def browser_context(browser: Any) -> Iterator[Any]:
    """One context for the module, so the HTTP cache keeps Streamlit's scripts between pages."""
    context = browser.new_context(viewport={"width": 1500, "height": 2700})
    yield context
    context.close()


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    pg = browser_context.new_page()
    pg.set_default_timeout(UI_TIMEOUT_MS)
    yield pg
    pg.close()


def _shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _wait_idle(page: Any) -> None:
    """Wait until Streamlit has finished the current script run."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=UI_TIMEOUT_MS
    )
    page.wait_for_timeout(300)


def _metric(page: Any, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return str(box.locator('[data-testid="stMetricValue"]').inner_text()).strip()


def _plot_data(page: Any, index: int = 0) -> list[dict[str, Any]]:
    return list(
        page.evaluate(
            """(i) => Array.from(document.querySelectorAll('.js-plotly-plot'))[i].data
                   .map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])}))""",
            index,
        )
    )


def _no_errors(page: Any) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in page.inner_text("body")


def _open(page: Any, url: str, timeout_ms: int = UI_TIMEOUT_MS) -> None:
    page.goto(url)
    page.wait_for_selector(".js-plotly-plot", timeout=timeout_ms)
    _wait_idle(page)


def _type(page: Any, label: str, text: str, url_has: str) -> None:
    """Type into the number or text input labelled ``label``; wait until the URL has ``url_has``."""
    box = page.locator('[data-testid="stNumberInput"], [data-testid="stTextInput"]').filter(has_text=label)
    field = box.locator("input").first
    field.fill(text)
    field.press("Enter")
    page.wait_for_function(f"() => decodeURIComponent(window.location.search).includes({url_has!r})")
    _wait_idle(page)


def test_serving_page_shows_the_api_numbers_and_plots(server: str, page: Any) -> None:
    _open(page, f"{server}/")
    _no_errors(page)
    assert page.locator(".js-plotly-plot").count() == 4
    dep = deployment("deepseek-v3", "gb200-nvl72")
    result = explain(dep, contexts=[4096])
    assert _metric(page, "Largest batch that fits") == f"{result.max_batch[0]:,.0f}"
    names = [t["name"] for t in _plot_data(page, 0)]
    assert "step (sum over operators)" in names
    assert any(str(n).startswith("latency floor") for n in names)
    _shot(page, "serving-default")


def test_batch_slider_changes_numbers_plot_and_url(server: str, page: Any) -> None:
    _open(page, f"{server}/?batch=256")
    before_step = _metric(page, "Step time")
    before_marker = next(t for t in _plot_data(page, 0) if str(t["name"]).startswith("selected batch"))
    # the batch slider by its label (the sidebar's feature sliders come first in the page)
    slider = (
        page.locator('[data-testid="stSlider"]')
        .filter(has_text="Batch (sequences decoding together)")
        .locator('input[type="range"]')
        .first
    )
    slider.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("() => window.location.search.includes('batch=2048')", timeout=UI_TIMEOUT_MS)
    _wait_idle(page)
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))[0].data
                 .some(t => String(t.name).startsWith('selected batch 2,048'))""",
        timeout=UI_TIMEOUT_MS,
    )
    after_marker = next(t for t in _plot_data(page, 0) if str(t["name"]).startswith("selected batch"))
    assert after_marker["x"] == [2048] and before_marker["x"] == [256]
    assert _metric(page, "Step time") != before_step
    _no_errors(page)
    _shot(page, "serving-batch-2048")


def test_a_shared_url_reproduces_the_view(server: str, page: Any) -> None:
    _open(page, f"{server}/?model=llama-3.1-70b&system=h100-hgx&chips=8&batch=64&context=8192")
    _no_errors(page)
    text = page.inner_text("body")
    assert catalog.model("llama-3.1-70b").name in text
    grid = deployment("llama-3.1-70b", "h100-hgx", chips=8)
    point = grid.decode([64], [8192])
    assert _metric(page, "Tokens/s (all chips)") == f"{point.tokens_per_s[0, 0]:,.0f}"
    _shot(page, "serving-llama-h100")


def test_bad_url_values_show_a_message_and_the_page_still_works(server: str, page: Any) -> None:
    _open(page, f"{server}/?batch=0&system=h100-hgxx")
    alerts = page.locator('[data-testid="stAlert"]').all_inner_texts()
    joined = "\n".join(alerts)
    assert "batch: got '0'" in joined
    assert "unknown system 'h100-hgxx'; did you mean h100-hgx" in joined
    assert page.locator(".js-plotly-plot").count() == 4  # defaults used, page still drawn
    _no_errors(page)
    _shot(page, "serving-bad-url")


def test_a_model_that_does_not_fit_shows_why(server: str, page: Any) -> None:
    _open(page, f"{server}/?model=llama-3.1-405b&system=h100-hgx&chips=1")
    alerts = "\n".join(page.locator('[data-testid="stAlert"]').all_inner_texts())
    assert "does not fit" in alerts
    assert page.locator(".js-plotly-plot").count() == 1  # the memory chart says why
    _no_errors(page)
    _shot(page, "serving-does-not-fit")


def test_deployments_page_searches_and_reports_an_impossible_slo(server: str, page: Any) -> None:
    _open(page, f"{server}/deployments?model=llama-3.1-8b&systems=h100-hgx,b200-hgx&precisions=native")
    _no_errors(page)
    assert _metric(page, "System") in {"h100-hgx", "b200-hgx"}
    frontier = next(t for t in _plot_data(page, 0) if str(t["name"]).startswith("frontier"))
    assert len(frontier["x"]) > 2
    _shot(page, "deployments-default")
    box = page.locator('[data-testid="stNumberInput"]').filter(has_text="TPOT SLO").locator("input")
    box.fill("0.5")
    box.press("Enter")
    page.wait_for_function("() => window.location.search.includes('tpot_ms=0.5')", timeout=UI_TIMEOUT_MS)
    page.get_by_text("no deployment meets the SLOs").wait_for(timeout=UI_TIMEOUT_MS)
    _wait_idle(page)
    assert page.locator(".js-plotly-plot").count() == 1  # the frontier is still drawn
    _no_errors(page)
    _shot(page, "deployments-impossible-slo")


def test_economics_fast_mode_follows_the_price_multiple_and_tabs_keep_the_url(server: str, page: Any) -> None:
    from rackmath.analyses.economics import fast_mode
    from rackmath.catalog import economics as ce

    _open(page, f"{server}/economics?tab=fast")
    _no_errors(page)
    dep, opus = deployment("deepseek-v3", "gb200-nvl72"), ce.price("claude-opus-4.6")
    six = fast_mode.report(dep, context=4096, price=opus).deployment
    assert six is not None and _metric(page, "Fast batch at 6x") == f"{six.fast_batch:,.0f}"
    _shot(page, "economics-fast")
    _type(page, "Price multiple (m)", "3", "fast.price_multiple=3.0")
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))[0].data
                 .some(t => String(t.name).startsWith('3x price'))""",
        timeout=UI_TIMEOUT_MS,
    )
    three = fast_mode.report(dep, context=4096, price=opus, price_multiple=3.0).deployment
    assert three is not None and _metric(page, "Fast batch at 3x") == f"{three.fast_batch:,.0f}"
    marker = next(t for t in _plot_data(page, 0) if str(t["name"]).startswith("3x price"))
    assert marker["x"] == [3.0] and marker["y"] == [pytest.approx(three.fast_speedup)]
    _no_errors(page)
    page.get_by_role("tab", name="What prices reveal").click()
    page.wait_for_function("() => window.location.search.includes('tab=prices')", timeout=UI_TIMEOUT_MS)
    page.get_by_text("Roofline output / input").wait_for(timeout=UI_TIMEOUT_MS)
    _wait_idle(page)
    assert "fast.price_multiple=3.0" in page.url  # the hidden tab keeps its state
    _no_errors(page)
    _shot(page, "economics-prices")


def test_training_page_numbers_and_the_pipeline_drawing(server: str, page: Any) -> None:
    from rackmath.api import pipeline, train
    from rackmath.views import fmt

    _open(page, f"{server}/training")
    _no_errors(page)
    r = train("llama-3.1-405b", "h100-hgx", "tp=8,pp=16,dp=64", tokens=15.6e12, global_batch=2048, zero=2)
    assert _metric(page, "Step time") == fmt.seconds(r.step.step_s)
    assert _metric(page, "MFU") == fmt.pct(r.mfu)
    assert _metric(page, "Bubble, simulated") == f"{pipeline(4, 8, '1f1b').timeline.bubble_frac:.4f}"
    _shot(page, "training-default")
    _type(page, "Stages P", "8", "pipe_stages=8")
    expected = pipeline(8, 8, "1f1b")
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))[2].data
                 .some(t => Array.from(t.y || []).includes('stage 7'))""",
        timeout=UI_TIMEOUT_MS,
    )
    assert _metric(page, "Bubble, simulated") == f"{expected.timeline.bubble_frac:.4f}"
    assert sum(len(t["x"]) for t in _plot_data(page, 2)) == len(expected.timeline.ops)
    _no_errors(page)
    _shot(page, "training-8-stages")


def test_validation_page_filters_rows_by_phase(server: str, page: Any) -> None:
    from rackmath.catalog.measurements import measurements

    _open(page, f"{server}/validation", timeout_ms=120_000)  # validate() runs once per server (~10 s)
    _no_errors(page)
    scenarios = measurements().scenarios
    body = page.inner_text("body")
    assert f"{len(scenarios)} shown" in body
    _shot(page, "validation-default")
    page.locator('[data-testid="stMultiSelect"]').filter(has_text="Phases").click()
    page.get_by_role("option", name="decode", exact=True).click()
    page.wait_for_function("() => window.location.search.includes('phases=decode')", timeout=UI_TIMEOUT_MS)
    page.keyboard.press("Escape")
    _wait_idle(page)
    decode = sum(s.phase.value == "decode" for s in scenarios)
    page.get_by_text(f"{decode} shown").wait_for(timeout=UI_TIMEOUT_MS)
    phases = {
        str(t["name"])
        for t in _plot_data(page, 0)
        if len(t["x"]) and t["name"] not in ("±20%", "predicted = measured")
    }
    assert phases == {"decode"}
    _no_errors(page)
    _shot(page, "validation-decode")


LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


def test_every_page_opens_by_its_url_and_no_request_leaves_the_machine(server: str, page: Any) -> None:
    """``/serving`` and every other page answer their own address (not 'Page not found'),
    and the browser asks only the local server: fonts, icons and scripts are all served
    locally (inline data and blob URLs excepted)."""
    from urllib.parse import urlparse

    from rackmath.web.pages import PAGES

    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    for entry in PAGES:
        timeout = 120_000 if entry.url_path == "validation" else UI_TIMEOUT_MS
        _open(page, f"{server}/{entry.url_path}", timeout_ms=timeout)
        _no_errors(page)
        assert "Page not found" not in page.inner_text("body"), entry.url_path
        page.get_by_role("heading", name=entry.title).first.wait_for(timeout=UI_TIMEOUT_MS)
        assert urlparse(page.url).path.rstrip("/").endswith(entry.url_path)
    _open(page, f"{server}/")  # the root still draws the first page
    page.get_by_role("heading", name=PAGES[0].title).first.wait_for(timeout=UI_TIMEOUT_MS)
    page.wait_for_timeout(1000)  # late requests (favicon, fonts) have been issued
    outside = sorted(
        {
            u
            for u in requested
            if urlparse(u).scheme not in ("data", "blob") and urlparse(u).hostname not in LOOPBACK_HOSTS
        }
    )
    assert requested and not outside, f"requests leaving the machine: {outside}"


# --------------------------------------------------------------------------- the planner's views


def _table_rows(page: Any, index: int = 0) -> list[dict[str, str]]:
    """The rows of an st.table, as the browser shows them (header -> cell text)."""
    return list(
        page.evaluate(
            """(i) => { const t = document.querySelectorAll('[data-testid="stTable"] table')[i];
                 const head = Array.from(t.querySelectorAll('thead th')).map(h => h.innerText.trim());
                 const cells = r => Array.from(r.querySelectorAll('th, td'));
                 return Array.from(t.querySelectorAll('tbody tr')).map(r => Object.fromEntries(
                     cells(r).map((c, j) => [head[j], c.innerText.trim()]))); }""",
            index,
        )
    )


def _command_text(page: Any) -> str:
    return str(page.locator('[data-testid="stCode"]').last.inner_text()).strip()


def test_compare_shows_the_apis_numbers_and_follows_a_control(server: str, page: Any) -> None:
    from rackmath.analyses.deploy.compare import Configuration, compare
    from rackmath.views import fmt

    _open(page, f"{server}/compare?n=2&b.system=b200-hgx&b.batch=256")
    _no_errors(page)
    model, h100, b200 = catalog.model("llama-3.1-70b"), catalog.system("h100-hgx"), catalog.system("b200-hgx")

    def expected(batch_b: int) -> Any:
        return compare(
            [
                Configuration(model, h100, 64, 8192, chips=8),
                Configuration(model, b200, batch_b, 8192, chips=8),
            ]
        )

    def check(result: Any) -> None:
        rows = {r["figure"]: r for r in _table_rows(page)}
        for p in result.points:
            column = f"{p.label}: {p.model} on {p.chips} x {p.chip}"
            assert rows["step time"][column] == fmt.seconds(p.step_s)
            usd = fmt.usd(p.usd_per_million_output_tokens)
            assert rows["$ per million output tokens"][column] == usd + "/M"
            assert rows["joules per output token"][column] == f"{p.joules_per_token:.3g} J"
            assert rows["memory per chip"][column] == fmt.nbytes(p.memory_bytes_per_chip)

    check(expected(256))
    assert "--on b200-hgx --chips 8 --batch 256" in _command_text(page)
    _shot(page, "compare-default")
    _type(page, "Batch (sequences)", "64", "a.batch=64")  # A's batch box comes first; it is already 64
    box = page.locator('[data-testid="stNumberInput"]').filter(has_text="Batch (sequences)").nth(1)
    field = box.locator("input").first
    field.fill("1024")
    field.press("Enter")
    page.wait_for_function("() => window.location.search.includes('b.batch=1024')", timeout=UI_TIMEOUT_MS)
    _wait_idle(page)
    check(expected(1024))
    assert "--batch 1024" in _command_text(page)
    _no_errors(page)
    _shot(page, "compare-b-batch-1024")


def test_simulate_shows_the_apis_attainment_and_follows_the_ttft_limit(server: str, page: Any) -> None:
    from rackmath.analyses.deploy import slo
    from rackmath.specs.workload import LengthDist
    from rackmath.views import fmt

    _open(page, f"{server}/simulate?requests=300&rate_per_s=4.0&output=300&ttft_ms=400&tpot_ms=25")
    _no_errors(page)
    fleet = slo.Fleet(catalog.model("llama-3.1-70b"), catalog.system("h100-hgx"), "tp=8")
    work = slo.Workload(4.0, 300, LengthDist.parse("lognormal:2000", "i"), LengthDist.parse("300", "o"), 0)

    def limits(ttft_s: float) -> slo.Slo:  # the page's SLO: both limits at its default attainment
        return slo.Slo((slo.Limit("ttft", ttft_s), slo.Limit("tpot", 0.025)), 0.99)

    run = slo.serve(fleet, work, limits(0.4))
    assert run.attainment is not None
    assert _metric(page, "TTFT ≤ 400 ms") == fmt.pct(run.attainment.met_frac["ttft"])
    assert _metric(page, "Both (SLO met)") == fmt.pct(run.attainment.all_frac or 0.0)
    rows = {r[""]: r for r in _table_rows(page)}
    assert rows["TPOT"]["p99"] == fmt.seconds(run.result.metrics["tpot_p99"])
    assert rows["TTFT (queueing included)"]["p50"] == fmt.seconds(run.result.metrics["ttft_p50"])
    assert len(_plot_data(page, 0)[0]["x"]) == 300  # one step of the TTFT distribution per request
    _shot(page, "simulate-default")
    _type(page, "TTFT limit (ms, queueing included)", "150", "ttft_ms=150")
    tighter = slo.serve(fleet, work, limits(0.15))
    assert tighter.attainment is not None
    page.get_by_text("TTFT ≤ 150 ms").wait_for(timeout=UI_TIMEOUT_MS)
    assert _metric(page, "TTFT ≤ 150 ms") == fmt.pct(tighter.attainment.met_frac["ttft"])
    assert tighter.attainment.met_frac["ttft"] <= run.attainment.met_frac["ttft"]
    assert "rackmath simulate llama-3.1-70b --on h100-hgx --plan tp=8" in _command_text(page)
    _no_errors(page)
    _shot(page, "simulate-ttft-150ms")


def test_frontier_draws_each_systems_curve_and_the_cost_view(server: str, page: Any) -> None:
    from rackmath.analyses.deploy.systems_frontier import systems_frontier

    _open(page, f"{server}/frontier?model=llama-3.1-8b&systems=h100-hgx,b200-hgx&max_chips=16")
    _no_errors(page)
    sf = systems_frontier(
        catalog.model("llama-3.1-8b"), [catalog.system(s) for s in ("h100-hgx", "b200-hgx")], max_chips=16
    )
    traces = {str(t["name"]).split(" ")[0]: t for t in _plot_data(page, 0)}
    for curve in sf.curves:
        pts = curve.frontier.frontier
        assert traces[curve.system]["y"] == pytest.approx([p.tokens_per_s_per_chip for p in pts], rel=1e-12)
    page.get_by_role("tab", name="Cost").click()
    _wait_idle(page)
    assert page.locator(".js-plotly-plot").nth(1).is_visible()  # the three views: one per tab
    shown = next(t for t in _plot_data(page, 1) if str(t["name"]).startswith("b200-hgx"))
    b200 = sf.curves[1].frontier.frontier
    assert shown["y"] == pytest.approx([p.usd_per_million_output_tokens for p in b200], rel=1e-12)
    _no_errors(page)
    _shot(page, "frontier-llama-8b")


#: Every page, and the views of a page that lay out other metrics.
LAYOUT_URLS = (
    "serving",
    "compare",
    "frontier",
    "simulate?requests=300",
    "deployments?model=llama-3.1-8b&systems=h100-hgx&precisions=native",
    "economics",
    "economics?tab=caches",
    "economics?tab=fast",
    "economics?tab=fleet&fleet.requests=300",
    "economics?tab=overtrain",
    "economics?tab=sparsity",
    "training",
    "training?recompute=none",
)
_CUT_JS = """() => Array.from(document.querySelectorAll('[data-testid="stMetric"]')).flatMap(m =>
    Array.from(m.querySelectorAll('*')).filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
      .map(e => e.innerText.slice(0, 40)))"""
_OVERLAP_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap((p, i) => {
    const box = e => { const b = e.getBoundingClientRect(); return b.width && b.height ? b : null; };
    const legend = p.querySelector('.legend .bg');
    const L = legend ? box(legend) : null;
    if (!L) return [];
    const hits = [];
    for (const sel of ['.g-gtitle', '.g-xtitle', '.g-ytitle', '.g-y2title', '.xtick text'])
        for (const e of p.querySelectorAll(sel)) { const B = box(e);
            if (B && L.left < B.right && B.left < L.right && L.top < B.bottom && B.top < L.bottom)
                hits.push(`plot ${i}: legend over ${sel} '${(e.textContent || '').slice(0, 30)}'`); }
    return hits; })"""


#: Each shown plot has laid itself out again at the window's new width (Plotly follows the
#: window's resize event, debounced): before this holds, a check reads the previous width's
#: layout. A plot in a hidden tab has no width and is skipped.
_RELAID_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).every(p => {
    const shown = p.getBoundingClientRect().width;
    return !shown || (p._fullLayout && Math.abs(p._fullLayout.width - shown) <= 2); })"""
LAYOUT_WIDTHS_PX = (1280, 1024)


def test_no_metric_is_cut_off_and_no_legend_covers_an_axis_title(server: str, browser: Any) -> None:
    """On 1de8042 at 1,280 px the Serving page cut '$ per M output tokens' and 'Bound by', the
    Training page cut its $48,831,592.95 cost, and legends sat on the x-axis titles. Each view
    is opened once and checked at each width: the window is narrowed in place, as a user does,
    rather than the page computed again for each width."""
    context = browser.new_context(viewport={"width": LAYOUT_WIDTHS_PX[0], "height": 2000})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    problems: dict[str, list[str]] = {}
    try:
        for url in LAYOUT_URLS:
            page.set_viewport_size({"width": LAYOUT_WIDTHS_PX[0], "height": 2000})
            _open(page, f"{server}/{url}")
            _no_errors(page)
            for width in LAYOUT_WIDTHS_PX:
                page.set_viewport_size({"width": width, "height": 2000})
                page.wait_for_function(_RELAID_JS)
                found = list(page.evaluate(_CUT_JS)) + list(page.evaluate(_OVERLAP_JS))
                if found:
                    problems[f"{url} at {width} px"] = found
    finally:
        context.close()
    assert not problems, problems


def test_simulate_runs_an_uploaded_trace_as_the_cli_does(
    server: str, page: Any, tmp_path: Path, cli: Any
) -> None:
    import json
    import shlex

    from rackmath.views import fmt

    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{0.25 * i:g},{500 + 37 * (i % 9)},{40 + 11 * (i % 5)}" for i in range(60)]
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    _open(page, f"{server}/simulate")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(trace))
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('[data-testid="stMetric"]'))
                 .some(m => m.innerText.includes('Offered') && m.innerText.includes('trace'))""",
        timeout=UI_TIMEOUT_MS,
    )
    _wait_idle(page)
    _no_errors(page)
    command = _command_text(page)
    assert "--trace trace.csv" in command and "--rate" not in command
    line = shlex.split(command.replace("trace.csv", str(trace)))
    code, out, err = cli(*line[1:])
    assert code == 0, err
    result = json.loads(out)["result"]
    shown = {r[""]: r for r in _table_rows(page)}
    for metric, name in (("ttft", "TTFT (queueing included)"), ("tpot", "TPOT")):
        for q in (50, 99):
            assert shown[name][f"p{q}"] == fmt.seconds(result[f"{metric}_p{q}_s"])
    assert _metric(page, "Output tokens/s") == f"{result['output_tokens_per_s']:,.0f}"
    _shot(page, "simulate-trace")

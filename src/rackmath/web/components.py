"""Widgets shared by the pages: pickers, URL sync, error display, exports.

Widgets are bound to ``st.session_state`` keys named ``<page>.<field>``. On a page's
first run in a session the keys are filled from the URL (:mod:`rackmath.web.state`), and
after the widgets are drawn the URL is rewritten from their values, so the address bar
always holds a view that can be shared.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from rackmath.catalog import loader as catalog
from rackmath.errors import RackmathError
from rackmath.specs.hardware import ChipSpec, SystemSpec
from rackmath.specs.precision import Precision
from rackmath.views import fmt
from rackmath.views.figure_spec import FigureData
from rackmath.web import render_plotly
from rackmath.web.state.bounds import BOUNDS
from rackmath.web.state.common import CUSTOM_MODEL, upload_text
from rackmath.web.wording import in_page_words

#: The selectbox entry meaning "let the analysis choose" (None in the page state).
DEFAULT = "default"


def key(page: str, field: str) -> str:
    return f"{page}.{field}"


def show_error(exc: RackmathError) -> None:
    """A user-caused problem, as one clear message on the page (never a traceback), in the
    page's words (a CLI flag the analysis names becomes the control's name)."""
    st.error(in_page_words(str(exc)), icon=":material/error:")


def show_errors(errors: Iterable[RackmathError]) -> None:
    for exc in errors:
        show_error(exc)


def show_url_errors(page: str, errors: Iterable[RackmathError]) -> None:
    """Errors of the URL a page was opened with, shown on its first run in the session only.

    Afterwards the widgets hold the state and the page writes the URL, free text included:
    a bad value typed in a text box is reported by the analysis that refuses it, not again
    by the URL parser on every later run.
    """
    seen = key(page, "url_read")
    if seen not in st.session_state:
        st.session_state[seen] = True
        show_errors(errors)


def init_state(page: str, values: Mapping[str, Any]) -> None:
    """Seed widget values (first run of the page in this session, or after a widget vanished)."""
    for field, value in values.items():
        k = key(page, field)
        if k not in st.session_state:
            st.session_state[k] = value


def sync_url(params: Mapping[str, str]) -> None:
    """Make the address bar hold exactly ``params`` (only writes when something changed)."""
    current = {k: st.query_params.get_all(k)[-1] for k in st.query_params}
    if current != dict(params):
        st.query_params.from_dict(dict(params))


#: The explorer's own styles: a metric's label and value wrap onto a second line where the
#: column is narrow instead of being cut off with an ellipsis (a cost read as "$48,8..." is
#: a wrong number), and values are drawn a little smaller than Streamlit's default.
PAGE_CSS = """<style>
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] *,
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * {
  white-space: normal !important; text-overflow: clip !important; overflow: visible !important;
  overflow-wrap: anywhere;
}
[data-testid="stMetricValue"] { font-size: 1.8rem; line-height: 1.25; }
</style>"""


def page_style() -> None:
    """Apply :data:`PAGE_CSS` (inline; nothing is fetched)."""
    st.markdown(PAGE_CSS, unsafe_allow_html=True)


# --------------------------------------------------------------------------- pickers


def _model_label(model_id: str) -> str:
    if model_id == CUSTOM_MODEL:
        return "custom: paste or upload a config.json"
    return f"{catalog.models()[model_id].name} ({model_id})"


def model_picker(page: str) -> tuple[str, str | None]:
    """Catalog model or a custom config.json; returns (model id or 'custom', config text)."""
    model = st.selectbox(
        "Model", [*catalog.models(), CUSTOM_MODEL], key=key(page, "model"), format_func=_model_label
    )
    if model != CUSTOM_MODEL:
        return model, None
    upload = st.file_uploader(
        "Upload a config.json", type=["json"], key=key(page, "upload"), help="Hugging Face config.json"
    )
    seen = key(page, "upload_id")
    if upload is not None and st.session_state.get(seen) != upload.file_id:
        st.session_state[seen] = upload.file_id
        try:
            st.session_state[key(page, "config")] = upload_text(upload.getvalue())
        except RackmathError as exc:
            show_error(exc)
    text = st.text_area(
        "…or paste its text",
        key=key(page, "config"),
        height=160,
        placeholder='{"model_type": "llama", "hidden_size": 4096, ...}',
    )
    return model, text


def system_picker(page: str, on_change: Callable[[], None]) -> SystemSpec:
    system_id = st.selectbox(
        "System",
        list(catalog.systems()),
        key=key(page, "system"),
        format_func=lambda s: f"{catalog.systems()[s].name} ({s})",
        on_change=on_change,
    )
    return catalog.system(system_id)


def precision_picker(
    page: str, field: str, label: str, options: Sequence[Precision], default: Precision | None
) -> str | None:
    """A precision, or DEFAULT (returned as None: the analysis picks its default)."""

    def show(value: str) -> str:
        if value == DEFAULT:
            return f"default ({default.value})" if default else "default"
        return value

    value = st.selectbox(
        label, [DEFAULT, *(p.value for p in options)], key=key(page, field), format_func=show
    )
    return None if value == DEFAULT else value


def choice_picker(
    page: str, field: str, label: str, options: Sequence[str], default: str | None, help: str | None = None
) -> str | None:
    """One of ``options``, or DEFAULT (returned as None: the analysis picks ``default``)."""

    def show(value: str) -> str:
        return (f"default ({default})" if default else "default") if value == DEFAULT else value

    value = st.selectbox(label, [DEFAULT, *options], key=key(page, field), format_func=show, help=help)
    return None if value == DEFAULT else value


def least(page: str, field: str) -> float:
    """A number widget's ``min_value``: the low end of the range its URL parser enforces."""
    return BOUNDS[key(page, field)][0]


def most(page: str, field: str) -> float:
    """A number widget's ``max_value``: the high end of the range its URL parser enforces."""
    return BOUNDS[key(page, field)][1]


def bounded_number(
    page: str,
    field: str,
    label: str,
    *,
    limits: tuple[float, float] | None = None,
    where: Any = st,
    **options: Any,
) -> Any:
    """A number widget keyed ``<page>.<field>`` from ``limits[0]`` to ``limits[1]``; without
    ``limits``, the range its URL parser enforces (:data:`~rackmath.web.state.bounds.BOUNDS`). ``where``
    is the container it goes in (a column; the page by default), ``options`` the widget's others."""
    lo, hi = limits if limits is not None else (least(page, field), most(page, field))
    return where.number_input(label, key=key(page, field), min_value=lo, max_value=hi, **options)


def optional_number(
    page: str, field: str, label: str, catalog_value: str, *, step: float, help: str
) -> float | None:
    """A number the user may leave empty (= the catalog's figure, shown as placeholder)."""
    value = st.number_input(
        label,
        min_value=least(page, field),
        max_value=most(page, field),
        value=None,
        step=step,
        key=key(page, field),
        placeholder=f"catalog: {catalog_value}",
        help=help,
    )
    return None if value is None else float(value)


def price_input(page: str, chip: ChipSpec) -> float | None:
    """The USD per chip-hour override, the catalog's dated price (flagged when an estimate)
    as placeholder; None keeps the catalog's."""
    price = chip.price_usd_per_chip_hour
    return optional_number(
        page,
        "usd_per_chip_hour",
        "USD per chip-hour",
        f"{fmt.usd(price.value_usd)}{price.estimate_label} ({price.date})",
        step=0.1,
        help=price.source,
    )


# --------------------------------------------------------------------------- exports


def cli_command(command: Any) -> None:
    """The ``rackmath ...`` command line(s) that reproduce the view (a
    :class:`rackmath.web.commands.Command`), in a code box with a copy button."""
    st.markdown("##### Copy as CLI command")
    st.code(command.text, language="bash", wrap_lines=True)
    for note in command.notes:
        st.caption(note)


def records_csv(records: Sequence[Mapping[str, Any]]) -> bytes:
    """Rows -> CSV (columns in the first row's order; nested values as JSON)."""
    buffer = io.StringIO()
    columns = list(records[0]) if records else []
    writer = csv.DictWriter(buffer, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in records:
        writer.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in row.items()})
    return buffer.getvalue().encode()


def records_json(records: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> bytes:
    return fmt.to_json(records).encode()


def downloads(
    page: str, stem: str, records: Sequence[Mapping[str, Any]], full: Mapping[str, Any] | None = None
) -> None:
    """CSV and JSON buttons for a table (and the full result as JSON, when given)."""
    buttons = [
        ("CSV", records_csv(records), f"{stem}.csv", "text/csv"),
        ("JSON", records_json(records), f"{stem}.json", "application/json"),
    ]
    if full is not None:
        buttons.append(("full result (JSON)", records_json(full), f"{stem}-full.json", "application/json"))
    for column, (label, data, name, mime) in zip(st.columns(len(buttons)), buttons, strict=True):
        column.download_button(
            label, data, name, mime, key=key(page, name), on_click="ignore", icon=":material/download:"
        )


def table(records: Sequence[Mapping[str, Any]] | Any) -> None:
    """A table whose cells read with their units (``12.3 ms``, ``64.3%``, ``$0.12/M``) by
    column suffix (:func:`rackmath.views.fmt.column`); the data behind it, and every download,
    stay in SI units."""
    import pandas as pd

    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    formats = {c: (lambda v, c=c: fmt.column(str(c), v)) for c in frame.columns}
    st.dataframe(frame.style.format(formats), hide_index=True)


def figure(page: str, name: str, fig: go.Figure | FigureData, stem: str) -> None:
    """A Plotly chart (a FigureData is drawn by :mod:`rackmath.web.render_plotly`); its
    toolbar's camera button downloads a PNG drawn by the browser."""
    if isinstance(fig, FigureData):
        fig = render_plotly.figure(fig)
    st.plotly_chart(
        fig,
        key=key(page, f"fig.{name}"),
        config={
            "displaylogo": False,
            "toImageButtonOptions": {"format": "png", "filename": f"{stem}-{name}", "scale": 2},
        },
    )


def figure_data(fig: go.Figure) -> list[dict[str, Any]]:
    """The figure's traces as plain records (name, x, y), for a JSON export of a plot."""
    out = []
    for trace in fig.data:
        x = getattr(trace, "x", None)
        y = getattr(trace, "y", None)
        out.append(
            {"name": trace.name, "x": None if x is None else list(x), "y": None if y is None else list(y)}
        )
    return out


def figures_json(figs: Mapping[str, go.Figure]) -> bytes:
    return json.dumps({name: figure_data(f) for name, f in figs.items()}, default=float).encode()


def png_download(page: str, stem: str, draw: Callable[[Path], Path], help: str) -> None:
    """A button offering a ``rackmath.plots`` (matplotlib) figure as PNG, drawn on click."""

    def data() -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            return draw(Path(tmp) / f"{stem}.png").read_bytes()

    st.download_button(
        "Plots as PNG (matplotlib)",
        data,
        f"{stem}.png",
        "image/png",
        key=key(page, f"{stem}.png"),
        on_click="ignore",
        icon=":material/image:",
        help=help,
    )

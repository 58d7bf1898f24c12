"""The registry of the explorer's pages: add a page here and it appears in the navigation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from rackmath.errors import RackmathError
from rackmath.web.components import show_error
from rackmath.web.page_compare import render_compare_page
from rackmath.web.page_deployments import render_deployments_page
from rackmath.web.page_economics import render_economics_page
from rackmath.web.page_frontier import render_frontier_page
from rackmath.web.page_serving import render_serving_page
from rackmath.web.page_simulate import render_simulate_page
from rackmath.web.page_training import render_training_page
from rackmath.web.page_validation import render_validation_page


@dataclass(frozen=True)
class PageEntry:
    title: str
    url_path: str
    icon: str
    render: Callable[[], None]


#: The browser tab's icon: an emoji, drawn inline by Streamlit (no font host is asked).
APP_ICON = "🧮"
#: The address the root page reserves (Streamlit serves the default page at ``/``).
ROOT_URL_PATH = "home"

PAGES: tuple[PageEntry, ...] = (
    PageEntry("Serving", "serving", ":material/speed:", render_serving_page),
    PageEntry("Compare", "compare", ":material/compare_arrows:", render_compare_page),
    PageEntry("Frontier", "frontier", ":material/show_chart:", render_frontier_page),
    PageEntry("Simulate", "simulate", ":material/timer:", render_simulate_page),
    PageEntry("Deployments", "deployments", ":material/hub:", render_deployments_page),
    PageEntry("Economics", "economics", ":material/payments:", render_economics_page),
    PageEntry("Training", "training", ":material/model_training:", render_training_page),
    PageEntry("Validation", "validation", ":material/fact_check:", render_validation_page),
)


def guarded(render: Callable[[], None]) -> Callable[[], None]:
    """Run a page; a user-caused error becomes a message on the page, never a traceback."""

    @functools.wraps(render)
    def run() -> None:
        try:
            render()
        except RackmathError as exc:
            show_error(exc)

    return run

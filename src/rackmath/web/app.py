"""The web explorer's entry script: ``rackmath web`` runs ``streamlit run`` on this file.

It only sets the page frame and the navigation; each page lives in its own module
(``page_<area>.py``) exposing ``render_<area>_page()``. A page that raises a
:class:`~rackmath.errors.RackmathError` shows its message and the app keeps running.

Every page is reachable by its URL (``/serving``, ``/deployments``, ...): Streamlit serves
its default page at ``/`` only, so the root is a hidden page of its own that draws the
first page, and the first page keeps its ``/serving`` address. The tab icon is an emoji,
which Streamlit draws as an inline SVG: no request leaves the machine (a ``:material/...:``
icon would be fetched from a font host).
"""

from __future__ import annotations

import streamlit as st

from rackmath.web.components import page_style
from rackmath.web.pages import APP_ICON, PAGES, ROOT_URL_PATH, guarded

st.set_page_config(page_title="rackmath", page_icon=APP_ICON, layout="wide")
page_style()
first = PAGES[0]
st.navigation(
    [
        st.Page(guarded(page.render), title=page.title, url_path=page.url_path, icon=page.icon)
        for page in PAGES
    ]
    + [
        st.Page(
            guarded(first.render),
            title=first.title,
            url_path=ROOT_URL_PATH,
            icon=first.icon,
            default=True,
            visibility="hidden",
        )
    ]
).run()

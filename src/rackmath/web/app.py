"""The web explorer's entry script: ``rackmath web`` runs ``streamlit run`` on this file.

It only sets the page frame and the navigation; each page lives in its own module
(``page_<area>.py``) exposing ``render_<area>_page()``. A page that raises a
:class:`~rackmath.errors.RackmathError` shows its message and the app keeps running.
"""

from __future__ import annotations

import streamlit as st

from rackmath.web.pages import PAGES, guarded

st.set_page_config(page_title="rackmath", page_icon=":material/calculate:", layout="wide")
st.navigation(
    [
        st.Page(
            guarded(page.render), title=page.title, url_path=page.url_path, icon=page.icon, default=i == 0
        )
        for i, page in enumerate(PAGES)
    ]
).run()

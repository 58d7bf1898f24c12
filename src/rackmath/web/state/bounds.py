"""The range of every real-valued input of every page, shared by the widgets and the URL parsers."""

from rackmath.web.state.common import PAGE_BOUNDS
from rackmath.web.state.economics import ECONOMICS_BOUNDS

#: The range of every real-valued input of every page (``<page>.<field>``), shared by the
#: widgets (min and max) and the URL parsers.
BOUNDS: dict[str, tuple[float, float]] = {
    **PAGE_BOUNDS,
    **{f"economics.{k}": v for k, v in ECONOMICS_BOUNDS.items()},
}

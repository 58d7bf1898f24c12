"""Views: analysis results turned into text and chart data for the faces. Figure data
(figures/, figure_spec), the explain derivation as text, the reading paragraph (narrative) and
number formatting (fmt). Views import analyses, specs and core; nothing below imports views."""

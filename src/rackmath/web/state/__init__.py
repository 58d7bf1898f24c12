"""Page state <-> URL, and page state -> specs.

A page's state is a frozen dataclass of plain values (strings, ints, floats, ``None``), so
it is hashable (the cache key of the page's computation) and round-trips through the URL:
``parse_serving_query(serving_query(state)) == (state, [])``. Parsing never raises: each
bad parameter becomes a :class:`RackmathError` the page shows, and the default is used.

Nothing here draws a widget or does math: it validates user input at the boundary and
builds the frozen specs (a custom model from a pasted ``config.json``, a chip with edited
figures) that the analyses take.

One module per page (``serving``, ``deployments``, ``economics``, ``training``,
``validation``) over ``common`` (the shared parsers);
``bounds`` holds the input range of every page's numbers.
"""

"""The embedded catalogs, loaded once and validated: chips, systems and models
(:mod:`rackmath.catalog.loader`); prices, power, runtimes, kernel tables and measurements beside them."""

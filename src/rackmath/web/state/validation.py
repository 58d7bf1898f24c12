"""The Validation page's state: which predictions to plot and which rows to show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackmath.catalog import loader as catalog
from rackmath.errors import RackmathError
from rackmath.web.state.common import QueryParams, choice, id_list, parse_fields, state_query

#: The prediction columns of the validation report, in order, with their labels.
VALIDATION_COLUMNS: dict[str, str] = {
    "roofline": "pure roofline",
    "calibrated": "calibrated (in-sample)",
    "loso": "leave-one-source-out",
}


VALIDATION_PHASES = ("decode", "prefill", "static-batch", "max-throughput", "training")


@dataclass(frozen=True)
class ValidationState:
    """The Validation page: which predictions to plot, and which rows to show (empty = all)."""

    columns: tuple[str, ...] = ("roofline", "calibrated")
    phases: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()


def _chip_id(key: str, text: str) -> str:
    return catalog.chip(text).id


_VALIDATION_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "columns": id_list(choice(tuple(VALIDATION_COLUMNS))),
    "phases": id_list(choice(VALIDATION_PHASES)),
    "hardware": id_list(_chip_id),
}


def parse_validation_query(params: QueryParams) -> tuple[ValidationState, list[RackmathError]]:
    values, errors = parse_fields(params, _VALIDATION_PARSERS)
    return ValidationState(**values), errors


def validation_query(state: ValidationState) -> dict[str, str]:
    """State -> URL; an empty selection (all phases, all hardware) is left out."""
    return {k: v for k, v in state_query(state).items() if v}

"""How numbers are written for people, in one place, for the console and every report alike.

NaN is "nan" and ±Inf "inf"/"-inf" wherever they appear (results.json stores NaN as null, which
reads back as NaN); "-" means there is no number at all (a row that compared no tensor).
"""

from __future__ import annotations

import math
import re
from typing import Any


def from_json_number(value: Any) -> float:
    """A number as results.json or a row holds it (null for NaN, "inf"/"-inf" strings) as a float."""
    if value is None:
        return math.nan
    return float(value)


def fmt(value: Any, spec: str = ".3g") -> str:
    """A ratio, an error or a value: ``spec`` formatted; "nan", "inf", "-inf" as they are."""
    number = from_json_number(value)
    if math.isnan(number):
        return "nan"
    return format(number, spec)


def fmt_or_dash(value: float | None) -> str:
    """:func:`fmt`, or "-" where there is no number at all (None in memory, e.g. no tensor compared)."""
    return "-" if value is None else fmt(value)


def short_number(value: float) -> str:
    """A tolerance in few columns: 1e-4, 5e-07 → 5e-7, 0.02, 0."""
    text = f"{value:.3g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def compact(value: float) -> str:
    """A ratio in at most 8 columns: 0.00291, 6.12e-4 (not 0.000612), 1.2e+3 → 1.2e3."""
    if math.isnan(value):
        return "nan"
    if not math.isfinite(value):
        return f"{value:g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return min(f"{value:.3g}", f"{float(mantissa):g}e{int(exponent)}", key=len)


def location_text(location: dict[str, Any] | None) -> str:
    """(t=1,b=0,unit=2) — the worst element of a tensor in its own terms; "" when there is none."""
    return "(" + ",".join(f"{k}={v}" for k, v in location.items()) + ")" if location else ""


# A JSON string (left as it is: group 1); a float below 0.01 written positionally (sign, the zeros
# after the point, the digits: groups 2-4); a float with an exponent (mantissa, the exponent's sign
# and digits without leading zeros: groups 5-7). A number starts after no digit or point, so the
# tail of 10.000469 is never taken for a number of its own.
_JSON_TOKEN = re.compile(r'("(?:[^"\\]|\\.)*")'
                         r'|(?<![\d.])(-?)0\.(0{2,})([1-9]\d*)(?![\d.eE])'
                         r'|(?<![\d.])(-?\d+(?:\.\d+)?)[eE]\+?(-?)0*(\d+)')


def _shortest_number(match: re.Match[str]) -> str:
    """The token, or a shorter spelling of the same decimal value: ``0.000469`` -> ``4.69e-4``,
    ``1.3e-07`` -> ``1.3e-7``, ``0.002`` -> ``2e-3`` (it reads back as the same float; strict JSON
    either way). String operations only: this runs on every row a run stores."""
    if match[1] is not None:
        return match[1]
    if match[4] is not None:
        digits = match[4]
        scientific = f"{match[2]}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e-{len(match[3]) + 1}"
        return scientific if len(scientific) < len(match[0]) else match[0]
    return f"{match[5]}e{match[6]}{match[7]}"


def shorten_json_numbers(text: str) -> str:
    """Compact JSON text with every float in its shortest spelling (results.json rows: ~3% fewer bytes)."""
    return _JSON_TOKEN.sub(_shortest_number, text)


def plural(count: int, noun: str) -> str:
    """``1 result``, ``2 results``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")

"""Kubernetes quantities (``20Gi``, ``500M``, ``2e9``) in bytes: one parser for the
history server's ``--cache-max-size`` and the Pulumi program's volume sizes."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<suffix>[KMGTPE]i|[kMGTPE]|[eE][+-]?\d+)?")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(text: str) -> int:
    """Bytes in a Kubernetes quantity: ``20Gi``, ``8G``, ``8589934592``, ``2e9``,
    ``8.5Gi`` (as KubeRay's Go history server accepts); ``8GiB``, ``lots``, negatives are errors."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size like 20Gi, 500Mi or 8G")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a size like 20Gi, 500Mi or 8G") from None
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= _DECIMAL[suffix]
    elif suffix:
        number *= Decimal(10) ** int(suffix[1:])
    return int(number.to_integral_value(rounding="ROUND_CEILING"))

"""Text from elsewhere (a history server, stored values) made safe to print on a terminal.

A server's error message, a job's entrypoint or a log file's name is chosen by someone
else; written as is, an escape sequence in it can clear the screen, retitle the window,
write the clipboard (OSC 52) or disguise what follows. Control characters become visible
escapes (``\\x1b``); newlines and tabs are kept.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI for some
# terminals) and the bidirectional overrides/isolates that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab shown as an escape."""
    return _UNSAFE.sub(_visible, text)

"""Text as a C string literal that every C99 / C++ compiler reads back as the same bytes."""

from __future__ import annotations

_SIMPLE_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("?"): "\\?", ord("\n"): "\\n", ord("\t"): "\\t"}


def c_string_literal(text: str) -> str:
    """`text`'s UTF-8 bytes as a C string literal: printable ASCII as is; quotes, backslashes and `?` (no
    trigraph can form) escaped; every other byte (control characters, non-ASCII UTF-8) as a three-digit
    octal escape, which, unlike `\\x`, cannot swallow a following hex digit."""
    out = []
    for byte in text.encode("utf-8"):
        if byte in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'

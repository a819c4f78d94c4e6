"""Byte encodings of the 3.11+/3.12 side tables: exception table and location (line) table.

Both are pure functions between bytes and plain tuples; `assemble` and `disassemble` own the
mapping between table offsets and Instruction objects.

* Exception table: entries ``(start, end, target, depth, lasti)`` in *byte* offsets, ``end``
  exclusive.  On disk: code units, varints of 6-bit chunks most significant first, bit 6 set on
  every chunk but the last, bit 7 set on the first byte of each entry.
* Location table: one entry per run of at most 8 code units sharing a position; the forms
  (short, one-line, no-column, long, none) are chosen the way CPython's assembler chooses them,
  so a round trip normally reproduces ``co_linetable`` byte for byte and always reproduces
  ``co_positions()``.  Positions are ``(line, end_line, col, end_col)`` with None for unknown.
"""
from __future__ import annotations

import sys
from typing import Iterable, Sequence

Position = tuple  # (line, end_line, col, end_col), members int or None


# -- exception table ---------------------------------------------------------------------------

def _be_varint(value: int) -> list[int]:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    return [c | 64 for c in chunks[:-1]] + [chunks[-1]]


def encode_exception_table(entries: Iterable[tuple[int, int, int, int, bool]]) -> bytes:
    out: list[int] = []
    for start, end, target, depth, lasti in entries:
        assert start % 2 == 0 and end % 2 == 0 and target % 2 == 0 and end > start
        first = _be_varint(start // 2)
        first[0] |= 128
        out += first + _be_varint((end - start) // 2) + _be_varint(target // 2)
        out += _be_varint((depth << 1) | int(lasti))
    return bytes(out)


def parse_exception_table(table: bytes) -> list[tuple[int, int, int, int, bool]]:
    it = iter(table)

    def read(first=None) -> int:
        b = next(it) if first is None else first
        value = b & 63
        while b & 64:
            b = next(it)
            value = (value << 6) | (b & 63)
        return value

    entries = []
    for b in it:
        start = read(b) * 2
        end = start + read() * 2
        target = read() * 2
        dl = read()
        entries.append((start, end, target, dl >> 1, bool(dl & 1)))
    return entries


# -- location table ----------------------------------------------------------------------------

def _le_varint(value: int) -> list[int]:
    out = []
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)
    return out


def _le_svarint(value: int) -> list[int]:
    return _le_varint(((-value) << 1) | 1 if value < 0 else value << 1)


def encode_linetable(runs: Sequence[tuple[Position | None, int]], firstlineno: int,
                     merge: bool = sys.version_info >= (3, 12)) -> bytes:
    """`runs`: (position, size in code units) per instruction, in code order.

    3.12 merges adjacent instructions with equal positions into one entry; 3.11 does not."""
    merged: list[list] = []
    for pos, size in runs:
        pos = tuple(pos) if pos is not None else (None, None, None, None)
        if merge and merged and merged[-1][0] == pos:
            merged[-1][1] += size
        else:
            merged.append([pos, size])
    out: list[int] = []
    state = {"line": firstlineno}
    for pos, size in merged:
        while size > 0:
            chunk = min(size, 8)
            _write_entry(out, pos, chunk, state)
            size -= chunk
    return bytes(out)


def _write_entry(out: list[int], pos: Position, size: int, state: dict) -> None:
    line, end_line, col, end_col = pos
    head = lambda code: out.append(0x80 | (code << 3) | (size - 1))  # noqa: E731
    if line is None:
        head(15)
        return
    delta = line - state["line"]
    if col is None or end_col is None:
        if end_line == line or end_line is None:
            head(13)
            out.extend(_le_svarint(delta))
            state["line"] = line
            return
    elif end_line == line:
        if delta == 0 and col < 80 and 0 <= end_col - col < 16:
            head(col // 8)
            out.append(((col % 8) << 4) | (end_col - col))
            return
        if 0 <= delta < 3 and col < 128 and end_col < 128:
            head(10 + delta)
            out += [col, end_col]
            state["line"] = line
            return
    head(14)
    out.extend(_le_svarint(delta))
    out.extend(_le_varint((end_line if end_line is not None else line) - line))
    out.extend(_le_varint(0 if col is None else col + 1))
    out.extend(_le_varint(0 if end_col is None else end_col + 1))
    state["line"] = line

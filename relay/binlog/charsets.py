"""Collation ids → character set, bytes per character, and a decoder that never fails.

Owned here: the table the row decoder and ``types.column_meta`` use to turn a column's collation id
(from TABLE_MAP optional metadata) into its character set. Pure data and functions, no state; it runs
on whatever thread decodes rows.

The ids below are MariaDB 10.11's ``information_schema.COLLATION_CHARACTER_SET_APPLICABILITY``
(including its UCA-14.0 collations 2048…3271 and the NO PAD ones 1024…1279) plus MySQL 8.x's own
ids (76 utf8mb3_tolower_ci, 248…250 gb18030, 255…323 the utf8mb4 *_0900_* collations). The two
servers agree on every id they share.

Decoding: each charset maps to a Python codec. MySQL's ``latin1`` is Windows-1252 except that the five
bytes cp1252 leaves undefined (0x81 0x8D 0x8F 0x90 0x9D) are the C1 controls U+0081… — decoded here
with a 256-entry table, so no byte can fail. ``binary`` and the few charsets Python has no codec for
(dec8, hp8, swe7, armscii8, keybcs2, geostd8) decode byte-for-byte as ISO-8859-1, which keeps every
byte and never fails. Any other malformed input (which a server does not store) becomes U+FFFD.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass

BINARY_COLLATION = 63

# Consecutive id ranges (first, last, charset), MariaDB 10.11 and MySQL 8.x.
_RANGES: tuple[tuple[int, int, str], ...] = (
    (1, 1, "big5"), (2, 2, "latin2"), (3, 3, "dec8"), (4, 4, "cp850"), (5, 5, "latin1"), (6, 6, "hp8"),
    (7, 7, "koi8r"), (8, 8, "latin1"), (9, 9, "latin2"), (10, 10, "swe7"), (11, 11, "ascii"),
    (12, 12, "ujis"), (13, 13, "sjis"), (14, 14, "cp1251"), (15, 15, "latin1"), (16, 16, "hebrew"),
    (18, 18, "tis620"), (19, 19, "euckr"), (20, 20, "latin7"), (21, 21, "latin2"), (22, 22, "koi8u"),
    (23, 23, "cp1251"), (24, 24, "gb2312"), (25, 25, "greek"), (26, 26, "cp1250"), (27, 27, "latin2"),
    (28, 28, "gbk"), (29, 29, "cp1257"), (30, 30, "latin5"), (31, 31, "latin1"), (32, 32, "armscii8"),
    (33, 33, "utf8mb3"), (34, 34, "cp1250"), (35, 35, "ucs2"), (36, 36, "cp866"), (37, 37, "keybcs2"),
    (38, 38, "macce"), (39, 39, "macroman"), (40, 40, "cp852"), (41, 42, "latin7"), (43, 43, "macce"),
    (44, 44, "cp1250"), (45, 46, "utf8mb4"), (47, 49, "latin1"), (50, 52, "cp1251"), (53, 53, "macroman"),
    (54, 55, "utf16"), (56, 56, "utf16le"), (57, 57, "cp1256"), (58, 59, "cp1257"), (60, 61, "utf32"),
    (62, 62, "utf16le"), (63, 63, "binary"), (64, 64, "armscii8"), (65, 65, "ascii"), (66, 66, "cp1250"),
    (67, 67, "cp1256"), (68, 68, "cp866"), (69, 69, "dec8"), (70, 70, "greek"), (71, 71, "hebrew"),
    (72, 72, "hp8"), (73, 73, "keybcs2"), (74, 74, "koi8r"), (75, 75, "koi8u"), (76, 76, "utf8mb3"),
    (77, 77, "latin2"), (78, 78, "latin5"), (79, 79, "latin7"), (80, 80, "cp850"), (81, 81, "cp852"),
    (82, 82, "swe7"), (83, 83, "utf8mb3"), (84, 84, "big5"), (85, 85, "euckr"), (86, 86, "gb2312"),
    (87, 87, "gbk"), (88, 88, "sjis"), (89, 89, "tis620"), (90, 90, "ucs2"), (91, 91, "ujis"),
    (92, 93, "geostd8"), (94, 94, "latin1"), (95, 96, "cp932"), (97, 98, "eucjpms"), (99, 99, "cp1250"),
    (101, 124, "utf16"), (128, 151, "ucs2"), (159, 159, "ucs2"), (160, 183, "utf32"),
    (192, 215, "utf8mb3"), (223, 223, "utf8mb3"), (224, 247, "utf8mb4"), (248, 250, "gb18030"),
    (255, 323, "utf8mb4"), (576, 578, "utf8mb3"), (608, 610, "utf8mb4"), (640, 642, "ucs2"),
    (672, 674, "utf16"), (736, 738, "utf32"),
    # MariaDB NO PAD collations: 1024 + the id of the PAD SPACE collation they derive from.
    (1025, 1025, "big5"), (1027, 1027, "dec8"), (1028, 1028, "cp850"), (1030, 1030, "hp8"),
    (1031, 1031, "koi8r"), (1032, 1032, "latin1"), (1033, 1033, "latin2"), (1034, 1034, "swe7"),
    (1035, 1035, "ascii"), (1036, 1036, "ujis"), (1037, 1037, "sjis"), (1040, 1040, "hebrew"),
    (1042, 1042, "tis620"), (1043, 1043, "euckr"), (1046, 1046, "koi8u"), (1048, 1048, "gb2312"),
    (1049, 1049, "greek"), (1050, 1050, "cp1250"), (1052, 1052, "gbk"), (1054, 1054, "latin5"),
    (1056, 1056, "armscii8"), (1057, 1057, "utf8mb3"), (1059, 1059, "ucs2"), (1060, 1060, "cp866"),
    (1061, 1061, "keybcs2"), (1062, 1062, "macce"), (1063, 1063, "macroman"), (1064, 1064, "cp852"),
    (1065, 1065, "latin7"), (1067, 1067, "macce"), (1069, 1070, "utf8mb4"), (1071, 1071, "latin1"),
    (1074, 1075, "cp1251"), (1077, 1077, "macroman"), (1078, 1079, "utf16"), (1080, 1080, "utf16le"),
    (1081, 1081, "cp1256"), (1082, 1083, "cp1257"), (1084, 1085, "utf32"), (1086, 1086, "utf16le"),
    (1088, 1088, "armscii8"), (1089, 1089, "ascii"), (1090, 1090, "cp1250"), (1091, 1091, "cp1256"),
    (1092, 1092, "cp866"), (1093, 1093, "dec8"), (1094, 1094, "greek"), (1095, 1095, "hebrew"),
    (1096, 1096, "hp8"), (1097, 1097, "keybcs2"), (1098, 1098, "koi8r"), (1099, 1099, "koi8u"),
    (1101, 1101, "latin2"), (1102, 1102, "latin5"), (1103, 1103, "latin7"), (1104, 1104, "cp850"),
    (1105, 1105, "cp852"), (1106, 1106, "swe7"), (1107, 1107, "utf8mb3"), (1108, 1108, "big5"),
    (1109, 1109, "euckr"), (1110, 1110, "gb2312"), (1111, 1111, "gbk"), (1112, 1112, "sjis"),
    (1113, 1113, "tis620"), (1114, 1114, "ucs2"), (1115, 1115, "ujis"), (1116, 1117, "geostd8"),
    (1119, 1120, "cp932"), (1121, 1122, "eucjpms"), (1125, 1125, "utf16"), (1147, 1147, "utf16"),
    (1152, 1152, "ucs2"), (1174, 1174, "ucs2"), (1184, 1184, "utf32"), (1206, 1206, "utf32"),
    (1216, 1216, "utf8mb3"), (1238, 1238, "utf8mb3"), (1248, 1248, "utf8mb4"), (1270, 1270, "utf8mb4"),
    # MariaDB UCA-14.0 collations (10.10+): one block of 256 ids per Unicode charset.
    (2048, 2303, "utf8mb3"), (2304, 2559, "utf8mb4"), (2560, 2815, "ucs2"), (2816, 3071, "utf16"),
    (3072, 3327, "utf32"),
)  # fmt: skip

# Maximum bytes per character (information_schema.CHARACTER_SETS.MAXLEN); 1 for the rest.
_MAXLEN: dict[str, int] = {
    "big5": 2, "cp932": 2, "euckr": 2, "gb2312": 2, "gbk": 2, "sjis": 2, "ucs2": 2,
    "eucjpms": 3, "ujis": 3, "utf8mb3": 3,
    "gb18030": 4, "utf16": 4, "utf16le": 4, "utf32": 4, "utf8mb4": 4,
}  # fmt: skip

# Python codec per MySQL charset; the missing ones decode as ISO-8859-1 (see the module docstring).
_CODEC: dict[str, str] = {
    "big5": "big5", "cp850": "cp850", "koi8r": "koi8_r", "latin2": "iso8859_2", "ascii": "ascii",
    "ujis": "euc_jp", "sjis": "shift_jis", "cp1251": "cp1251", "hebrew": "iso8859_8", "tis620": "tis_620",
    "euckr": "euc_kr", "latin7": "iso8859_13", "koi8u": "koi8_u", "gb2312": "gb2312", "greek": "iso8859_7",
    "cp1250": "cp1250", "gbk": "gbk", "cp1257": "cp1257", "latin5": "iso8859_9", "utf8mb3": "utf-8",
    "ucs2": "utf-16-be", "cp866": "cp866", "macce": "mac_latin2", "macroman": "mac_roman", "cp852": "cp852",
    "utf8mb4": "utf-8", "utf16": "utf-16-be", "utf16le": "utf-16-le", "cp1256": "cp1256",
    "utf32": "utf-32-be", "binary": "latin-1", "cp932": "cp932", "eucjpms": "euc_jp", "gb18030": "gb18030",
}  # fmt: skip

_BY_ID: dict[int, str] = {i: name for first, last, name in _RANGES for i in range(first, last + 1)}

# MySQL latin1: cp1252 with its five holes filled by the C1 control of the same code.
_LATIN1_TABLE = "".join(
    bytes([b]).decode("cp1252") if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else chr(b) for b in range(256)
)

Decoder = Callable[[bytes], str]


@dataclass(frozen=True, slots=True)
class Charset:
    """One character set: its MySQL name, the most bytes a character takes, and a text decoder."""

    name: str
    maxlen: int
    decode: Decoder


def _latin1(raw: bytes) -> str:
    return codecs.charmap_decode(raw, "strict", _LATIN1_TABLE)[0]


def iso8859_1(raw: bytes) -> str:
    """One character per byte: canal's text of binary values (and of columns of unknown charset)."""
    return raw.decode("latin-1")


def utf8(raw: bytes) -> str:
    """UTF-8 text; "replace" only matters for bytes a server never stores. One function for every
    UTF-8 charset: the C row reader (relay/binlog/_rowimage.c) recognises it and decodes in C."""
    return raw.decode("utf-8", "replace")


def _codec_decoder(codec: str) -> Decoder:
    if codec == "utf-8":
        return utf8

    def decode(raw: bytes) -> str:
        return raw.decode(codec, "replace")

    return decode


def _make(name: str) -> Charset:
    if name == "latin1":
        decode: Decoder = _latin1
    elif name in _CODEC and name != "binary":
        decode = _codec_decoder(_CODEC[name])
    else:
        decode = iso8859_1
    return Charset(name, _MAXLEN.get(name, 1), decode)


_CHARSETS: dict[str, Charset] = {name: _make(name) for name in {n for _, _, n in _RANGES}}
UTF8MB4 = _CHARSETS["utf8mb4"]
BINARY = _CHARSETS["binary"]


def charset_of(collation: int | None) -> Charset | None:
    """The charset of a collation id; None when the id is None or unknown to this table."""
    if collation is None:
        return None
    name = _BY_ID.get(collation)
    return _CHARSETS[name] if name is not None else None


def is_binary(collation: int | None) -> bool:
    """True for the ``binary`` pseudo-charset (BINARY, VARBINARY, BLOB columns)."""
    return collation == BINARY_COLLATION

"""The zip and XML underneath EPUB, ODT and PPTX, read within bounds a hostile file cannot move.

An EPUB, an OpenDocument file and an Office Open XML file are each a zip of XML parts. A small
zip can claim or hold gigabytes (a zip bomb), a small XML part can expand to gigabytes through
entities it declares (billion laughs), and a part can name another by a path that leaves the
archive (`../../etc/passwd`). So, here, for the three formats alike:

- the zip's own count of members is read from its last bytes before zipfile reads its
  directory (a directory of a million members costs zipfile ~500 MiB of objects);
- a member is read only after its declared size, its ratio of inflation and the bytes read so
  far are checked, and through a reader that stops at the limit, whatever the size declared;
- XML is parsed by expat with a handler that refuses entity declarations and DTDs of their own
  (an external DTD is only named, never fetched, so it is let be: every EPUB 2 table of
  contents names one), and counts elements as they are built, per part and in all;
- a path inside the archive is normalised, and one that leaves the archive's root, names a
  scheme or a host is no member at all;
- a file that is an OLE compound file, not a zip, is what Office writes when a password
  encrypts a document, and is refused as such.
"""

from __future__ import annotations

import io
import posixpath
import struct
import urllib.parse
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from types import TracebackType
from typing import Self
from xml.parsers import expat

from metis_lite.errors import ParseError
from metis_lite.parsing.common import reason

MEMBER_BYTES_MAX = 64 * 1024 * 1024
"""The most one member read (an XML part, a chapter) may hold uncompressed: a 1,000-page
document's content.xml holds ~20 MiB."""

TOTAL_BYTES_MAX = 256 * 1024 * 1024
"""The most all the members read from one file may hold uncompressed, together."""

MEMBERS_MAX = 50_000
"""The most members a zip may hold: a deck of 10,000 slides with their notes holds ~40,000."""

RATIO_MAX = 100
"""The most a member larger than RATIO_FLOOR_BYTES may inflate: XML inflates 4–20×, a zip bomb
of empty elements 1,000×."""

RATIO_FLOOR_BYTES = 1024 * 1024

PART_ELEMENTS_MAX = 500_000
"""The most elements one XML part may hold: its tree is held whole while it is read, ~500
bytes an element with an attribute and its text (a million took 490 MiB), so 250 MiB at most,
within a parse worker's least share (settings.PARSE_MEMORY_MIN). A 1,000-page document's
content.xml holds ~300,000."""

ELEMENTS_MAX = 2_000_000
"""The most elements all the parts of one file may hold together, chapters counted from their
bytes (common.count_elements): a million take ~3 s to build, so a file costs seconds."""

READ_BYTES = 1024 * 1024
"""A member is inflated this many bytes at a time."""

OLE_MAGIC = bytes.fromhex("D0CF11E0A1B11AE1")
"""The first bytes of an OLE compound file: what Office saves a document encrypted with a
password as (its `EncryptionInfo` stream names the cipher), and what Office 97–2003 saved."""

OLE_ENCRYPTED = "EncryptionInfo".encode("utf-16-le")

ZIP_ENCRYPTED = 0x1
"""The flag of a zip member encrypted by the zip itself (a password zip tools ask for)."""

_END_OF_DIRECTORY = b"PK\x05\x06"
_END_RECORD = struct.Struct("<4s4H2LH")
_END_SEARCH_BYTES = _END_RECORD.size + 0xFFFF  # the record, and a comment of at most 64 KiB
_NAMESPACE = "}"

START, END, SKIP = "start", "end", "skip"
"""The events of `descend`."""


class Archive:
    """A zip opened to be read within bounds: `read` a member's bytes, `xml` its tree.

    `label` names the format in every reason ("EPUB", "ODT", "PPTX"). The bytes and elements
    read are counted across every call, so the bounds hold for the file, not each part."""

    def __init__(self, data: bytes, label: str) -> None:
        self.label = label
        if not data.strip():
            raise ParseError("empty file")
        if data.startswith(OLE_MAGIC):
            if OLE_ENCRYPTED in data:
                raise ParseError(f"encrypted {label}: a password is needed to read it")
            raise ParseError(
                f"an Office 97–2003 file (OLE), not a {label}: open it and save it as .{label.lower()}"
            )
        members = _declared_members(data)
        if members is not None and members > MEMBERS_MAX:
            raise ParseError(
                f"{label} refused: {members:,} members in its zip (at most {MEMBERS_MAX:,})"
            )
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except Exception as exc:  # BadZipFile, and OSError/ValueError for damaged directories
            raise ParseError(f"not a valid {label} (not a zip file: {reason(exc)})") from exc
        if len(infos) > MEMBERS_MAX:
            self._zip.close()
            raise ParseError(
                f"{label} refused: {len(infos):,} members in its zip (at most {MEMBERS_MAX:,})"
            )
        self._members = {info.filename: info for info in infos}
        self.bytes_read = 0
        self.elements = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._zip.close()

    def has(self, name: str | None) -> bool:
        return name is not None and name in self._members

    def read(self, name: str) -> bytes:
        """A member's bytes, inflated a block at a time, refused past the bounds before any
        byte is inflated where its declared size says so, and as it inflates otherwise."""
        info = self._members.get(name)
        if info is None:
            raise ParseError(f"not a valid {self.label} (it has no {name})")
        if info.flag_bits & ZIP_ENCRYPTED:
            raise ParseError(f"encrypted {self.label}: a password is needed to read {name}")
        declared = info.file_size
        if declared > MEMBER_BYTES_MAX:
            raise ParseError(self._bomb(f"{name} declares {declared / 2**20:,.0f} MiB"))
        if declared > RATIO_FLOOR_BYTES and declared > RATIO_MAX * max(info.compress_size, 1):
            ratio = declared / max(info.compress_size, 1)
            raise ParseError(
                self._bomb(f"{name} inflates {ratio:,.0f}× to {declared / 2**20:,.0f} MiB")
            )
        if self.bytes_read + declared > TOTAL_BYTES_MAX:
            raise ParseError(self._bomb(f"its parts hold more than {TOTAL_BYTES_MAX // 2**20} MiB"))
        limit = min(MEMBER_BYTES_MAX, TOTAL_BYTES_MAX - self.bytes_read)
        blocks: list[bytes] = []
        size = 0
        try:
            with self._zip.open(info) as stream:
                while block := stream.read(min(READ_BYTES, limit + 1 - size)):
                    size += len(block)
                    if size > limit:
                        raise ParseError(
                            self._bomb(f"{name} inflates past {limit / 2**20:,.0f} MiB")
                        )
                    blocks.append(block)
        except ParseError:
            raise
        except Exception as exc:  # BadZipFile (a bad CRC), zlib.error, EOFError, encrypted zip
            raise ParseError(f"not a valid {self.label} ({name}: {reason(exc)})") from exc
        self.bytes_read += size
        return b"".join(blocks)

    def xml(self, name: str) -> ET.Element:
        """A member parsed as XML (parse_xml), its elements counted against the file's."""
        root, count = parse_xml(self.read(name), f"{self.label} part {name}", self.room())
        self.elements += count
        return root

    def room(self) -> int:
        """The elements a part may still hold: its own bound, within what the file has left."""
        return min(PART_ELEMENTS_MAX, ELEMENTS_MAX - self.elements)

    def count(self, elements: int, name: str) -> None:
        """Count a part's elements counted elsewhere (a chapter's, from its bytes)."""
        self.elements += elements
        if self.elements > ELEMENTS_MAX:
            raise ParseError(
                f"{self.label} refused at {name}: more than {ELEMENTS_MAX:,} elements in all "
                "(an element bomb?)"
            )

    def _bomb(self, what: str) -> str:
        return f"{self.label} refused: {what} uncompressed (a zip bomb?)"


def member_name(folder: str, href: str) -> str | None:
    """The member a reference names from a part in `folder` ("" for the root): relative to
    the folder, or to the root when it begins with "/" (as Office's relationships may); its
    fragment and query dropped, its %-escapes decoded. None for a reference that is a URL
    (a scheme or a host), or whose path leaves the root (`../../etc/passwd`): never read."""
    parts = urllib.parse.urlsplit(href.strip())
    if parts.scheme or parts.netloc or not parts.path:
        return None
    path = urllib.parse.unquote(parts.path)
    if "\x00" in path or "\\" in path:
        return None
    joined = path.lstrip("/") if path.startswith("/") else posixpath.join(folder, path)
    normal = posixpath.normpath(joined)
    if normal in (".", "..") or normal.startswith(("../", "/")):
        return None
    return normal


def parse_xml(data: bytes, part: str, room: int) -> tuple[ET.Element, int]:
    """Parse `data` into an ElementTree tree, and how many elements it holds.

    Refused: an entity declaration or a DTD of the document's own (where billion laughs
    declares its entities), more than `room` elements, and XML that is not well formed."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate(namespace_separator=_NAMESPACE)
    parser.buffer_text = True
    count = 0

    def start(name: str, attributes: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > room:
            raise ParseError(
                f"{part} holds more than {room:,} elements (an element bomb?): too many to read"
            )
        builder.start(_clark(name), {_clark(k): v for k, v in attributes.items()})

    def doctype(name: str, system: str | None, public: str | None, internal: bool) -> None:
        if internal:
            raise ParseError(f"{part} declares a DTD of its own (an entity bomb?): refused")

    def entity(name: str, *_: object) -> None:
        raise ParseError(f"{part} declares an entity ({name}; an entity bomb?): refused")

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda name: builder.end(_clark(name))
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    try:
        parser.Parse(data, True)
        root = builder.close()
    except ParseError:
        raise
    except Exception as exc:  # expat.ExpatError, and AssertionError for an empty tree
        raise ParseError(f"{part} is not valid XML ({reason(exc)})") from exc
    return root, count


def descend(
    root: ET.Element, skipped: frozenset[str] = frozenset()
) -> Iterator[tuple[str, ET.Element]]:
    """("start", element) as each element starts and ("end", element) as it ends, in document
    order, with an explicit stack (any depth is safe); an element whose tag is in `skipped` is
    passed over whole, as ("skip", element). An element's `text` follows its start, its `tail`
    its end or its skip."""
    stack: list[tuple[str, ET.Element]] = [(START, root)]
    while stack:
        event, element = stack.pop()
        if event == START and element.tag in skipped:
            event = SKIP
        yield event, element
        if event == START:
            stack.append((END, element))
            stack.extend((START, child) for child in reversed(element))


def _clark(name: str) -> str:
    """expat's "uri}local" as ElementTree's "{uri}local"."""
    return "{" + name if _NAMESPACE in name else name


def _declared_members(data: bytes) -> int | None:
    """The members a zip's end-of-directory record counts (0xFFFF: more, in Zip64), or None
    when it has none (zipfile then says what is wrong)."""
    at = data.rfind(_END_OF_DIRECTORY, max(0, len(data) - _END_SEARCH_BYTES))
    if at < 0 or at + _END_RECORD.size > len(data):
        return None
    record = _END_RECORD.unpack_from(data, at)
    total = record[4]
    return MEMBERS_MAX + 1 if total == 0xFFFF else total

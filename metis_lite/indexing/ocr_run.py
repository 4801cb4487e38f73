"""What an index run says about OCR: the languages each source is read in, and the scanned
pages it could not read, each said once per run.

- A source's languages are those it names (`index --ocr-languages eng+deu`, source_ocr), else
  the packs installed (parsing/ocr.py); a pack it names that is not installed is left out with
  one OCR_LANGUAGE_MISSING warning for the run (the others are still read).
- Without Tesseract, an image and a PDF with no text layer are skipped with the reason
  NO_TEXT_LAYER, and a PDF's scanned pages are left out of its document; the run says so once,
  counting them, with what to install: NO_TEXT_LAYER.
- An image too small to hold text (parsing/image.py: ocr.TOO_SMALL, an icon) is left out without a
  word: neither a skip nor a warning (a documentation tree has dozens, and every run reads
  them again, since none becomes a document).
- A file whose scanned pages OCR could not all read (its time spent, a page tesseract failed
  on) is indexed with the others, and said once by OCR_INCOMPLETE, with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metis_lite.parsing import ocr
from metis_lite.records import MetisWarning
from metis_lite.store import Store

OCR_LANGUAGE_MISSING = "OCR_LANGUAGE_MISSING"
"""The warning of a run whose source names an OCR language whose pack is not installed."""

OCR_INCOMPLETE = "OCR_INCOMPLETE"
"""The warning of a run that indexed a file without some of its scanned pages (see why)."""

NAMED_MAX = 3
"""The files a warning names before it counts the rest."""


@dataclass
class OcrRun:
    """One run's OCR: each source's languages, looked up once, and what it could not read."""

    _options: dict[int, str] | None = None
    _languages: dict[int, str] = field(default_factory=dict)
    _missing: list[str] = field(default_factory=list)
    _no_text: list[tuple[str, int]] = field(default_factory=list)  # (file, pages)
    _incomplete: list[tuple[str, int, str]] = field(default_factory=list)

    def languages(self, store: Store, source_id: int, source_name: str) -> str:
        """The languages OCR reads the source's files in ("": no OCR here)."""
        if source_id not in self._languages:
            if self._options is None:
                self._options = {i: o.ocr_languages for i, o in store.source_options().items()}
            asked = self._options.get(source_id, "")
            languages, missing = ocr.languages_for(asked)
            if missing:
                packs = ", ".join(f"tesseract-ocr-{name}" for name in missing)
                self._missing.append(
                    f"{source_name}: OCR language {'+'.join(missing)} is not installed "
                    f"(Debian: {packs}); its scans are read in {languages} instead"
                )
            self._languages[source_id] = languages
        return self._languages[source_id]

    def note(self, label: str, refused: str | None, unread: int, why: str) -> bool:
        """Count what a parsed file left unread: refused with NO_TEXT_LAYER, or `unread`
        scanned pages (for `why`). True for an image too small to hold text: left out unsaid."""
        if refused is not None and refused.startswith(ocr.TOO_SMALL):
            return True
        if refused is not None:
            if refused.startswith(ocr.NO_TEXT_LAYER):
                self._no_text.append((label, 0))
        elif unread and why.startswith(ocr.NO_TEXT_LAYER):
            self._no_text.append((label, unread))
        elif unread:
            self._incomplete.append((label, unread, why))
        return False

    def warnings(self) -> list[MetisWarning]:
        """The run's OCR warnings, each code once."""
        said = [MetisWarning(OCR_LANGUAGE_MISSING, line) for line in self._missing]
        if self._no_text:
            whole = sum(1 for _, n in self._no_text if n == 0)
            pages = sum(n for _, n in self._no_text)
            parts = [
                f"{whole:,} image{'s' * (whole != 1)} or PDF{'s' * (whole != 1)} with no text layer"
                * bool(whole),
                f"{pages:,} scanned page{'s' * (pages != 1)} of other PDFs" * bool(pages),
            ]
            files = [f for f, _ in self._no_text]
            named = ", ".join(files[:NAMED_MAX]) + (
                f" and {len(files) - NAMED_MAX:,} more" if len(files) > NAMED_MAX else ""
            )
            said.append(
                MetisWarning(
                    ocr.NO_TEXT_LAYER,
                    f"{' and '.join(p for p in parts if p)} not read ({named}): {ocr.INSTALL_HINT}",
                )
            )
        if self._incomplete:
            label, unread, why = self._incomplete[0]
            more = len(self._incomplete) - 1
            said.append(
                MetisWarning(
                    OCR_INCOMPLETE,
                    f"{label}: {unread:,} scanned page{'s' * (unread != 1)} not read ({why})"
                    + (f"; and {more} more file{'s' * (more != 1)}" if more else ""),
                )
            )
        return said

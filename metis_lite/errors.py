"""The one exception tree of metis-lite; each error knows its public code and HTTP status.

    MetisError                      METIS_ERROR              500
    ├── InvalidRequest              INVALID_REQUEST          400
    │   └── SourceOverlap           SOURCE_OVERLAP           409   (a folder inside another source)
    ├── StoreError                  STORE_ERROR              500
    │   ├── NotABase                NOT_A_BASE               400
    │   ├── SchemaTooNew            SCHEMA_TOO_NEW           409
    │   ├── BaseBusy                BASE_BUSY                409
    │   ├── BaseNotFound            BASE_NOT_FOUND           404
    │   ├── BaseReadOnly            BASE_READ_ONLY           409
    │   ├── DiskFull                DISK_FULL                507   (the unfinished write is not kept)
    │   └── SpecInvalid             SPEC_INVALID             409   (a value of the base's spec)
    ├── ParseError                  PARSE_ERROR              422   (a document is skipped)
    ├── SourceNotFound              SOURCE_NOT_FOUND         404
    ├── DocumentNotFound            DOCUMENT_NOT_FOUND       404   (its file, read by the console's link)
    ├── ModelError                  MODEL_ERROR              502
    │   ├── ModelUnavailable        MODEL_UNAVAILABLE        503   (no answer within the deadline)
    │   │   ├── EmbeddingModelUnavailable  EMBEDDING_MODEL_UNAVAILABLE  503
    │   │   └── RerankerUnavailable        RERANKER_UNAVAILABLE         503
    │   └── ModelAnswerInvalid      MODEL_ANSWER_INVALID     502   (wrong dimension, NaN, garbage)
    └── AccessError                 UNAUTHORIZED / FORBIDDEN 401 / 403

The CLI and the HTTP service translate these into exit codes and JSON errors; nothing else
catches broadly.
"""

from __future__ import annotations


class MetisError(Exception):
    """Root of every error metis-lite raises on purpose."""

    code = "METIS_ERROR"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidRequest(MetisError):
    code = "INVALID_REQUEST"
    status = 400


class StoreError(MetisError):
    code = "STORE_ERROR"
    status = 500


class NotABase(StoreError):
    code = "NOT_A_BASE"
    status = 400


class SchemaTooNew(StoreError):
    code = "SCHEMA_TOO_NEW"
    status = 409


class BaseBusy(StoreError):
    code = "BASE_BUSY"
    status = 409


class BaseNotFound(StoreError):
    code = "BASE_NOT_FOUND"
    status = 404


class BaseReadOnly(StoreError):
    code = "BASE_READ_ONLY"
    status = 409


class DiskFull(StoreError):
    code = "DISK_FULL"
    status = 507


class ParseError(MetisError):
    code = "PARSE_ERROR"
    status = 422


class ModelError(MetisError):
    code = "MODEL_ERROR"
    status = 502


class ModelUnavailable(ModelError):
    code = "MODEL_UNAVAILABLE"
    status = 503


class EmbeddingModelUnavailable(ModelUnavailable):
    code = "EMBEDDING_MODEL_UNAVAILABLE"


class RerankerUnavailable(ModelUnavailable):
    code = "RERANKER_UNAVAILABLE"


class ModelAnswerInvalid(ModelError):
    code = "MODEL_ANSWER_INVALID"
    status = 502


class AccessError(MetisError):
    code = "UNAUTHORIZED"
    status = 401


class Forbidden(AccessError):
    code = "FORBIDDEN"
    status = 403


class DocumentNotFound(MetisError):
    """A document asked for by source and path that the base does not hold, or whose file is
    gone, moved outside its source, or is not a regular file any more."""

    code = "DOCUMENT_NOT_FOUND"
    status = 404


class SpecInvalid(StoreError):
    """A value of the base's spec table has the wrong type (spec.py)."""

    code = "SPEC_INVALID"
    status = 409


class SourceOverlap(InvalidRequest):
    """A folder inside a source of the base, or holding one: its files would be indexed twice."""

    code = "SOURCE_OVERLAP"
    status = 409


class SourceNotFound(MetisError):
    """A source asked for by name that the base does not have."""

    code = "SOURCE_NOT_FOUND"
    status = 404

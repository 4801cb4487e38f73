"""The one exception tree of metis-lite; each error knows its public code, HTTP status, exit code.

    error                           code                     HTTP  exit
    MetisError                      METIS_ERROR              500   1
    ├── InvalidRequest              INVALID_REQUEST          400   2
    │   └── SourceOverlap           SOURCE_OVERLAP           409   2   (a folder inside another source)
    ├── StoreError                  STORE_ERROR              500   1
    │   ├── NotABase                NOT_A_BASE               400   1
    │   ├── BaseDamaged             BASE_DAMAGED             409   1   (SQLite finds the file malformed)
    │   ├── SchemaTooNew            SCHEMA_TOO_NEW           409   1
    │   ├── BaseBusy                BASE_BUSY                409   4
    │   ├── BaseNotFound            BASE_NOT_FOUND           404   2
    │   ├── BaseReadOnly            BASE_READ_ONLY           409   1
    │   ├── DiskFull                DISK_FULL                507   1   (the unfinished write is not kept)
    │   └── SpecInvalid             SPEC_INVALID             409   1   (a value of the base's spec)
    ├── ParseError                  PARSE_ERROR              422   1   (a document is skipped)
    ├── SourceNotFound              SOURCE_NOT_FOUND         404   2
    ├── DocumentNotFound            DOCUMENT_NOT_FOUND       404   2   (its file, read by the console's link)
    ├── ModelError                  MODEL_ERROR              502   3
    │   ├── ModelUnavailable        MODEL_UNAVAILABLE        503   3   (no answer within the deadline)
    │   │   ├── EmbeddingModelUnavailable  EMBEDDING_MODEL_UNAVAILABLE  503  3
    │   │   └── RerankerUnavailable        RERANKER_UNAVAILABLE         503  3
    │   └── ModelAnswerInvalid      MODEL_ANSWER_INVALID     502   3   (wrong dimension, NaN, garbage)
    └── AccessError                 UNAUTHORIZED             401   1   (no token, or not one we know)
        └── Forbidden               FORBIDDEN                403   1   (a base the token may not name)

Exit codes are the same for every command (the README's table): 0 done; 1 error (what the
command names is there but cannot be used, or the command failed on the way); 2 bad usage or
request (a value, or a base, folder, file or source that is not there); 3 a model did not answer;
4 the base is busy (another process is indexing it); 130 interrupted (Ctrl-C), 143 by SIGTERM; 141 the reader
of the output stopped reading (`… | head -1`). They live here, beside the codes, so that every
entry point (the CLI, the servers) reads one table and none imports another. The CLI and the HTTP service translate errors into
exit codes and JSON errors; nothing else catches broadly.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_MODEL = 3
EXIT_BUSY = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143
"""The exit codes of every command (the table above); 130, 141 and 143 are 128 + SIGINT, 128 +
SIGPIPE and 128 + SIGTERM, as shells report a command those signals end."""


class MetisError(Exception):
    """Root of every error metis-lite raises on purpose."""

    code = "METIS_ERROR"
    status = 500
    exit_code = EXIT_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class InvalidRequest(MetisError):
    code = "INVALID_REQUEST"
    status = 400
    exit_code = EXIT_USAGE


class StoreError(MetisError):
    code = "STORE_ERROR"
    status = 500


class NotABase(StoreError):
    code = "NOT_A_BASE"
    status = 400


class BaseDamaged(StoreError):
    """A base whose file SQLite finds malformed (a damaged page, a truncated file): refused,
    never written, until it is replaced by a copy made before the damage."""

    code = "BASE_DAMAGED"
    status = 409


class SchemaTooNew(StoreError):
    code = "SCHEMA_TOO_NEW"
    status = 409


class BaseBusy(StoreError):
    code = "BASE_BUSY"
    status = 409
    exit_code = EXIT_BUSY


class BaseNotFound(StoreError):
    code = "BASE_NOT_FOUND"
    status = 404
    exit_code = EXIT_USAGE


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
    exit_code = EXIT_MODEL


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
    exit_code = EXIT_USAGE


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
    exit_code = EXIT_USAGE


def exit_code(exc: BaseException) -> int:
    """The exit code of an error, the same for every command: its class's (the tree above);
    an error metis-lite did not raise on purpose is 1."""
    return exc.exit_code if isinstance(exc, MetisError) else EXIT_ERROR

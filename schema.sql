-- metis-lite base file, schema version 3 (PRAGMA application_id 0x4D455449, "METI"). The one
-- source of the DDL.
-- Every table but chunks_fts reads in a stock sqlite3 shell; chunks_fts needs the 'metis'
-- tokenizer (open it with `metis-lite shell BASE`).

CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,          -- schema_version, created_at, notes_source (metis-<file name>),
                                   -- chunk_rules (the chunking rules its chunks were cut by);
                                   -- published_id, published_at in a published copy (publish.py)
  value TEXT NOT NULL
);

-- The base's spec: one row per setting, the value as JSON (embedding, reranker, chunk_size, kind, ...).
CREATE TABLE IF NOT EXISTS spec (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

-- The base's drives: each a folder (or one file), documents named by their path inside it.
CREATE TABLE IF NOT EXISTS sources (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  path     TEXT,                   -- NULL for the base's own notes source (metis-<base>)
  added_at TEXT NOT NULL
);

-- How each source is read (schema version 3): a folder or one file, and what a folder leaves
-- out besides hidden files (docs/indexing.md, "What a folder leaves out"). A source without a
-- row (one added before version 3) is a folder that reads its ignore files and excludes
-- nothing more; the notes source has none.
CREATE TABLE IF NOT EXISTS source_options (
  source_id INTEGER PRIMARY KEY REFERENCES sources(id) ON DELETE CASCADE,
  kind      TEXT NOT NULL DEFAULT 'folder' CHECK (kind IN ('folder', 'file')),
  excludes  TEXT NOT NULL DEFAULT '[]',  -- JSON list of gitignore patterns (index --exclude)
  no_ignore INTEGER NOT NULL DEFAULT 0   -- 1: its .gitignore, .ignore, .metisignore are not read
);

-- The languages OCR reads a source's scanned pages and images in (schema version 4; `index
-- --ocr-languages eng+deu`). A source without a row: the language packs installed (ocr.py).
CREATE TABLE IF NOT EXISTS source_ocr (
  source_id INTEGER PRIMARY KEY REFERENCES sources(id) ON DELETE CASCADE,
  languages TEXT NOT NULL          -- Tesseract's pack names joined by '+'
);

CREATE TABLE IF NOT EXISTS documents (
  id           INTEGER PRIMARY KEY,
  source_id    INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
  path         TEXT NOT NULL,      -- inside its source, '/'-separated: policies/leave.md
  kind         TEXT NOT NULL,      -- md, txt, html, pdf, docx (note for a base's notes)
  title        TEXT NOT NULL,
  content_hash TEXT NOT NULL,      -- sha256 of the file's bytes
  size         INTEGER NOT NULL,
  mtime        REAL,
  indexed_at   TEXT NOT NULL,
  UNIQUE (source_id, path)
);

CREATE TABLE IF NOT EXISTS chunks (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: the in-memory matrix keys on it
  document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
  ordinal     INTEGER NOT NULL,    -- its place in the document, from 0
  text        TEXT NOT NULL,
  title       TEXT NOT NULL,
  headings    TEXT NOT NULL,       -- JSON array: ["Handbook", "Leave policy", "Vacation"]
  page        INTEGER,             -- 1-based (pdf)
  line        INTEGER              -- 1-based line where the chunk starts (txt, md)
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id, ordinal);

-- Where a chunk is, beyond its page and line (schema version 4): the id of its heading in an
-- HTML or EPUB page, and whether its text was read by OCR. Only chunks that have either.
CREATE TABLE IF NOT EXISTS chunk_places (
  chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
  anchor   TEXT,                   -- page.html#anchor opens the page at the chunk's heading
  ocr      INTEGER NOT NULL DEFAULT 0  -- 1: read from an image of the page (Tesseract)
);

-- Files whose bytes are those of an indexed document of the same kind (schema version 4):
-- listed here as its copies, never parsed, cut or embedded again (docs/indexing.md, "Copies").
-- A copy whose file changes becomes a document of its own; a document removed or changed
-- hands its row, chunks and vectors to its first copy, which takes its place.
CREATE TABLE IF NOT EXISTS document_copies (
  source_id   INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
  path        TEXT NOT NULL,       -- inside its source, as documents.path
  document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,  -- the original
  size        INTEGER NOT NULL,
  mtime       REAL,
  PRIMARY KEY (source_id, path)
);
CREATE INDEX IF NOT EXISTS copies_by_document ON document_copies(document_id);
CREATE INDEX IF NOT EXISTS documents_by_hash ON documents(content_hash);

-- What each vector was embedded from (schema version 4): the sha256 of the text the model was
-- given (the document prefix, title, headings and text). A chunk whose text has a digest here
-- with a vector of the run's model gets that vector, copied, and is not embedded again.
CREATE TABLE IF NOT EXISTS chunk_digests (
  chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
  digest   BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_digest ON chunk_digests(digest);

-- Words of each chunk (rowid = chunks.id): its text, and its title and headings as context.
-- 'metis 2' names the word rules (tokenizer.py): version 2 makes CJK bigrams and keeps marks in
-- words. A base of schema version 1 has tokenize='metis' (version 1) until `index` rebuilds it.
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
  text, context, content='', contentless_delete=1, tokenize='metis 2'
);

-- One vector per chunk at most, float32 little-endian (sqlite-vec's format), tagged with its model.
-- seq grows with every write, so a reader brings its matrix up to date with only what changed.
CREATE TABLE IF NOT EXISTS vectors (
  seq       INTEGER PRIMARY KEY AUTOINCREMENT,
  chunk_id  INTEGER NOT NULL UNIQUE REFERENCES chunks(id) ON DELETE CASCADE,
  model     TEXT NOT NULL,
  embedding BLOB NOT NULL
);

-- Chunks whose vector went away (chunk removed, or re-embedded): readers mask them.
CREATE TABLE IF NOT EXISTS vector_removals (
  seq      INTEGER PRIMARY KEY AUTOINCREMENT,
  chunk_id INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS vectors_removed AFTER DELETE ON vectors BEGIN
  INSERT INTO vector_removals (chunk_id) VALUES (old.chunk_id);
END;

-- Indexing runs, newest last: what status shows as "last indexing".
CREATE TABLE IF NOT EXISTS runs (
  id          INTEGER PRIMARY KEY,
  started_at  TEXT NOT NULL,
  finished_at TEXT,
  state       TEXT NOT NULL,       -- running, done, failed
  added       INTEGER NOT NULL DEFAULT 0,
  updated     INTEGER NOT NULL DEFAULT 0,
  removed     INTEGER NOT NULL DEFAULT 0,
  unchanged   INTEGER NOT NULL DEFAULT 0,
  skipped     INTEGER NOT NULL DEFAULT 0,
  embedded    INTEGER NOT NULL DEFAULT 0
);

-- Searches per day: counts only, never what was asked (spec, "Where a search runs").
CREATE TABLE IF NOT EXISTS search_counts (
  day      TEXT PRIMARY KEY,       -- YYYY-MM-DD, UTC
  searches INTEGER NOT NULL
);

-- Evaluation sets a user saved on purpose (`metis-lite eval save`): their own test questions
-- and what should answer them, never results, and never what users searched for.
CREATE TABLE IF NOT EXISTS eval_sets (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  items    TEXT NOT NULL,          -- JSON lines: {"question": …, "expected": [{"document": …, "page"?, "line"?, "grade"?}]}
  origin   TEXT NOT NULL,          -- the file or BEIR folder it was read from
  saved_at TEXT NOT NULL
);

-- Each `metis-lite eval run` of a saved set: its metrics per mode and the base's spec then.
CREATE TABLE IF NOT EXISTS eval_runs (
  id      INTEGER PRIMARY KEY,
  set_id  INTEGER NOT NULL REFERENCES eval_sets(id) ON DELETE CASCADE,
  ran_at  TEXT NOT NULL,
  spec    TEXT NOT NULL,           -- JSON: {"embedding": model, "chunk_size": …, "reranker": …}
  metrics TEXT NOT NULL            -- JSON: {"hybrid": {"ndcg@10": …, "recall@10": …, …}, …}
);

-- Facts of a base's notes source (metis-<base>); in a memory, a newer fact replaces an older
-- one with the same key, or the ones it names. Nothing is deleted: a replaced fact stays,
-- marked with what replaced it and when. Each fact is a document (kind 'note') of one chunk.
CREATE TABLE IF NOT EXISTS facts (
  id          INTEGER PRIMARY KEY,
  document_id INTEGER NOT NULL UNIQUE REFERENCES documents(id),
  text        TEXT NOT NULL,
  stated_at   TEXT NOT NULL,       -- ISO 8601, UTC
  subject     TEXT,
  key         TEXT,                -- e.g. ana/role: a newer fact with this key replaces the older
  replaced_by INTEGER REFERENCES facts(id),
  replaced_at TEXT
);
CREATE INDEX IF NOT EXISTS facts_by_key ON facts(key, stated_at);

"""Pure work on text, beneath everything that reads or ranks it.

tokenizer.py       the words of a text, by the base's word rules, and the FTS5 tokenizer on them
unicode_tables.py  the character classes the word rules read (generated)
languages.py       the scripts and languages of a base's text
chunking.py        a parsed Document cut into chunks (its rules' version is a base's meta)
plain.py           Markdown read as plain text (snippets, the console)

Its face: tokenizer, languages, chunking and plain.
"""

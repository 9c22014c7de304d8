"""Rules as code: the whole rule set as a YAML file people keep in git.

``yamlfile`` (byte-stable writing, reading with the line of every member),
``services`` (export the active version, read and check a file, diff it against
the active version, apply it as a change request). The file's schema is
``limits.rules.schema``, published as ``docs/rules.schema.json``; the format is
explained in ``docs/rules-as-code.md``.
"""

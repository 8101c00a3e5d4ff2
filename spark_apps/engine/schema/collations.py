"""String collations in a schema (delta's protocol RFC "Collated String Type", the ``collations`` /
``collations-preview`` writer features).

A string's collation sits in the ``__COLLATIONS`` metadata of its nearest ancestor struct field,
keyed by the field's name plus ``.element`` / ``.key`` / ``.value`` for strings inside arrays and
maps: ``{"name": "c", "type": "string", "metadata": {"__COLLATIONS": {"c": "spark.UTF8_LCASE"}}}``.
An identifier is ``provider.name[.version]``; a string without one is binary (UTF8_BINARY).
Collations change only how strings compare, not how they are stored: a reader that compares
bytes reads the same rows. File statistics of a collated column may be ordered by its collation
(Spark collects them so), so binary data skipping must not use them (:func:`non_binary_collation`).
"""

from __future__ import annotations

from ..errors import InvalidSchemaError
from .types import StructField, StructType, walk

COLLATIONS_KEY = "__COLLATIONS"

#: the table features that allow collation metadata (the preview name Spark 4.0 / DBR write, the stable one)
COLLATION_FEATURES = ("collations", "collations-preview")


def is_binary_collation(identifier: str) -> bool:
    """Whether a collation identifier (``provider.name[.version]``, or a bare name) compares strings by
    their UTF-8 bytes: Spark's ``UTF8_BINARY``."""
    parts = str(identifier).split(".")
    name = parts[1] if len(parts) > 1 else parts[0]
    return name.upper() == "UTF8_BINARY"


def collation_identifier(name: str) -> str | None:
    """The identifier Spark 4 stores for a collation named in SQL (``COLLATE UTF8_LCASE``):
    ``spark.UTF8_LCASE`` for Spark's own UTF8_* collations, ``icu.<name>`` for the others (``UNICODE_CI``,
    ``de_CI``); a name given with its provider (``icu.de_CI``) is kept. None for UTF8_BINARY, which the
    protocol says is never written.

    :raises InvalidSchemaError: the name is empty or not a collation name
    """
    text = str(name).strip()
    if not text or not all(part and (part.replace("_", "").replace("-", "").isalnum()) for part in text.split(".")):
        raise InvalidSchemaError(
            f"'{name}' is not a collation name",
            "a collation is a name such as UTF8_LCASE, UNICODE_CI or de_CI, optionally after its provider "
            "(spark., icu.)",
            "write e.g. name STRING COLLATE UTF8_LCASE",
        )
    if is_binary_collation(text):
        return None
    if "." in text:
        return text
    return f"spark.{text.upper()}" if text.upper().startswith("UTF8_") else f"icu.{text}"


def non_binary_collation(field: StructField) -> str | None:
    """The collation of ``field``'s own string value when it is not binary, else None."""
    found = (field.metadata or {}).get(COLLATIONS_KEY)
    if not isinstance(found, dict):
        return None
    identifier = found.get(field.name)
    return None if identifier is None or is_binary_collation(identifier) else str(identifier)


def collated_columns(schema: StructType) -> list[str]:
    """Dotted paths of the fields (nested ones too) whose ``__COLLATIONS`` name a non-binary collation."""
    out = []
    for path, _, f in walk(schema):
        if f is None:
            continue
        found = (f.metadata or {}).get(COLLATIONS_KEY)
        if isinstance(found, dict) and any(not is_binary_collation(v) for v in found.values()):
            out.append(".".join(path))
    return out

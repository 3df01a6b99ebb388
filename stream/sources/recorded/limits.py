"""How much of a log is held or read at once: every reader bounds what it takes from outside by these.

They live apart so that the reader of each format keeps the same bounds; what happens past one (a bad
record, reading on in pieces) is each reader's own.
"""

from __future__ import annotations

BATCH = 256  # events and bad records handed on at once from a log that is not live
CHUNK = 1 << 22  # what is read (or decoded from a mapping) at once
MAX_RECORD = 16 << 20  # a few MB above the largest object the API server stores (etcd's 1.5 MB request limit)
SNIFF = 1 << 16  # how much of a log's beginning may be read to tell its format

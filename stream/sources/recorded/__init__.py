"""Reading recorded watch-event logs, whatever their format, as batches of events and bad records.

Formats are told apart by content, never by the file's name, so users need not say what they have: JSON
lines (the API server's watch stream, or `crashwatch record`), kubectl's pretty-printed objects back to
back, a List document (item by item when it is longer than the record limit), an array of records
(`jq -s`), YAML (one or several documents), any of them compressed with gzip, bzip2 or xz,
in UTF-8 (with or without a byte order mark), UTF-16 or UTF-32, and `-` for standard input. Each record
is decoded by `stream.model.decode`, the same code the live watch uses.

Hostile or broken input costs what it spoils and no more: a record longer than the limit is skipped
without being held (a line is never accumulated past it, and a growing line is never copied again and
again), one bad record is reported once and the next one is read as if nothing happened, damaged
compressed data keeps everything before the damage, binary data (a NUL byte) ends a log's read at once,
and every message fits on one line.

The package is a module per concern, each saying what it leaves to the others: opening.py opens a log
(a file or standard input) through the layers that undo its compression and encoding (layers.py) and
tells its format from its first lines (sniffing.py), into the LogSource every reader takes (source.py);
lines.py cuts the content into lines, bounded, and into ranges of whole lines for worker processes;
json_records.py reads JSON (lines, pretty-printed records, Lists; arrays with json_arrays.py) and
yaml_records.py YAML documents; reading.py picks the reader; limits.py and bad_records.py hold the
bounds and the words of bad records that they all share. Callers import from here.
"""

from stream.sources.recorded.bad_records import LogItem
from stream.sources.recorded.json_records import JsonRecords
from stream.sources.recorded.limits import MAX_RECORD
from stream.sources.recorded.lines import Oversized, line_end, line_ranges, map_file
from stream.sources.recorded.opening import LogUnreadable, open_log
from stream.sources.recorded.reading import read_log
from stream.sources.recorded.sniffing import is_json_lines
from stream.sources.recorded.source import DEFAULT_NAMESPACE, LogSource

__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_RECORD",
    "JsonRecords",
    "LogItem",
    "LogSource",
    "LogUnreadable",
    "Oversized",
    "is_json_lines",
    "line_end",
    "line_ranges",
    "map_file",
    "open_log",
    "read_log",
]

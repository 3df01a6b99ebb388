"""What the world sends, typed: Kubernetes objects as msgspec Structs, the `WatchEvent`, and their decoders.

Pure: no sockets, no files, no event loop. The pipeline reads only this half of `stream`; reading bytes
from an API server or a log is `stream.sources`' job.
"""

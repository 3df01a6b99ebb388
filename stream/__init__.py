"""Read side of crashwatch: bytes from a log or a live watch become typed `WatchEvent`s.

Two halves: `stream.model` (the typed objects, events and decoders; pure) and `stream.sources` (the API
client, the reflector, the log readers and the recorder; all the I/O). This package knows Kubernetes
objects and wire formats, and nothing of diagnoses.
"""

"""Where the bytes come from: the API server client, the list+watch reflector, the log readers, the recorder.

Everything here does I/O and hands on what `stream.model` decodes; the pure core never imports it.
"""

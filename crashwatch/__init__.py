"""crashwatch: tell a crash loop from a slow start in NVIDIA Dynamo graphs on Kubernetes.

This package is the command line and the wiring; the work is done in `stream`, `pipeline` and `sinks`.
"""

__version__ = "0.1.0"

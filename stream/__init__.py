"""Read side of crashwatch: bytes from a log or a live watch become typed `WatchEvent`s.

This package knows Kubernetes objects and wire formats, and nothing of diagnoses.
"""

"""Why an inference worker crashed, read from its output: a catalog of known causes and a scanner that
finds the root one. Pure: it reads lines handed to it and nothing else."""

from pipeline.causes.cause import UNKNOWN, Cause
from pipeline.causes.scan import Scanner, classify

__all__ = ["UNKNOWN", "Cause", "Scanner", "classify"]

"""Exit codes, from sysexits(3) where one fits: scripts and CI branch on them (docs/cli.md)."""

OK = 0
FAILED = 1  # `wait`: a graph failed (a component crash-loops, or its status says failed)
USAGE = 2
NOT_FOUND = 3  # `wait`, `get`: a named graph does not exist
DATAERR = 65  # bad records in a log
NOINPUT = 66  # a log that cannot be opened or read
# the API server cannot be reached (refused, no such host, TLS, no answer): EX_NOHOST, a network request
# that found nobody to answer it; apart from 69, a cluster that answers but lacks what the command needs
UNREACHABLE = 68
UNAVAILABLE = 69  # the cluster does not serve what the command needs (the Dynamo CRDs for `run`)
SOFTWARE = 70  # a bug in crashwatch: reported in one line, never as a traceback
CANTCREAT = 73  # the record file cannot be created
IOERR = 74  # `replay`: standard output cannot be written (a full disk, an I/O error)
NOPERM = 77  # the credentials may not list/watch (or write) what the command needs
CONFIG = 78  # no usable kubeconfig or in-cluster configuration
TIMEOUT = 124  # `wait`: not decided within --timeout (as timeout(1) exits)
INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT)
SIGPIPE = 141  # stdout closed early (`| head`)

"""Exit codes, from sysexits(3) where one fits: scripts and CI branch on them (docs/cli.md)."""

OK = 0
USAGE = 2
DATAERR = 65  # bad records in a log
NOINPUT = 66  # a log that cannot be opened or read
SOFTWARE = 70  # a bug in crashwatch: reported in one line, never as a traceback
SIGPIPE = 141  # stdout closed early (`| head`)

"""Exit codes shared by every command (node-problem-detector compatible).

NPD's custom-plugin protocol reads 0 as OK, 1 as NonOK and anything else as Unknown
(kubernetes/node-problem-detector pkg/custompluginmonitor/types/types.go).
"""

from __future__ import annotations

OK = 0
PROBLEM = 1  # a failing finding, an alert, a refused start
CANNOT_CHECK = 2  # an `unknown`, a usage error as click gives it, no device
INTERNAL = 3  # a bug: one line on stderr, the traceback in a log file
INTERRUPTED = 130
BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout left before the result

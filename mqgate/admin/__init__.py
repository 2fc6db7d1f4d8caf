"""Administration: the `mqgate` command line (and, later, admin request handlers)."""

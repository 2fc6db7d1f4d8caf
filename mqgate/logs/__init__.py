"""
The broker's log (twisted.logger): filters by level and category, text or JSON lines,
and a log file rolled over by size and age (``mqgate.log.*``).

``observers`` decides which events go where and in what form; ``files`` keeps the log
file; ``setup`` builds both from the settings and twistd's own logging options.
"""

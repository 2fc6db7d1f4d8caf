"""What the broker measures and how it shows it: the process's figures
(L{mqgate.metrics.process}), the admin C{metrics} commands, Prometheus exposition and
the C{mq.metrics.*} topics (S5)."""

"""The verdict of a chaos run, from plain data only: what was observed (``observations``),
the safety and loss checks (``safety``), failover and coverage (``failover``), blips
(``blips``), the checks of each job kind (``kinds``) and the report that combines them. No
I/O here (an import contract in pyproject.toml): the harness gathers, this package judges, so
a finished run can be judged again offline and every check is a unit test."""

"""Jobs as users write them and read them back: validated specs, references to handlers
that hand a run on, job files, registries of jobs defined in code, and the read models of
jobs and runs."""

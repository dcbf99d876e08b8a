"""Who may use ``pulse web``: API tokens and their audit trail (``tokens``), and the
console's signed-in browser sessions (``console_sessions``). Only hashes of secrets are
stored."""

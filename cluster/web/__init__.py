"""``pulse web``: Pulse's HTTP API and console (docs/web.md, docs/design/web.md).

Only the modules that serve HTTP import FastAPI and uvicorn (the optional ``web`` extra);
``tokens`` and ``allowlist`` are plain Python, shared with the CLI.
"""

"""The commands of docs/compose.md that the compose cluster's end-to-end test runs, as the
page shows them: the test runs them, and tests/test_compose.py checks the page shows them."""

from __future__ import annotations

UP = "PULSE_TRIAL=1 bin/compose up -d --wait"
IMAGE = "bin/compose image HEAD~1"
BUILD = "bin/compose build"
MIGRATE = "PULSE_IMAGE=$NEW bin/compose run --rm init"
ROLL = "PULSE_IMAGE=$NEW bin/compose up -d --no-deps --wait {service}"
DOWN = "bin/compose down -v"
DUMP = "bin/compose exec -T postgres pg_dump -U postgres -Fc pulse > pulse.dump"
RESTORE = (
    "bin/compose exec -T postgres pg_restore -U postgres -d pulse --no-owner --no-privileges"
    " --role=pulse < pulse.dump"
)
UP_AGAIN = "bin/compose up -d --wait"
MONITOR = "bin/compose --profile monitoring up -d --wait prometheus"
MONITOR_OFF = "bin/compose --profile monitoring rm -fsv prometheus"
DOC_COMMANDS = (
    UP,
    IMAGE,
    BUILD,
    MIGRATE,
    ROLL.format(service="node-a"),
    DUMP,
    DOWN,
    f"{UP_AGAIN} postgres",
    RESTORE,
    UP_AGAIN,
    MONITOR,
)

# The passwords compose/compose.yaml reads from compose/.env, none with a default.
SECRET_NAMES = (
    "POSTGRES_PASSWORD",
    "PULSE_OWNER_PASSWORD",
    "PULSE_NODE_PASSWORD",
    "PULSE_WEB_PASSWORD",
    "REDIS_PASSWORD",
)

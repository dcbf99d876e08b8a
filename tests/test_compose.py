"""compose/: the services, health checks, start order, commands and environment agree with
the CLI. Uses ``docker compose config`` too where a compose client is installed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

import node.cli  # noqa: F401  (registers `pulse node` on the group)
from cluster.cli.app import cli
from node.metrics import build_registry
from node.state import NodeState
from node.stats import Stats
from tests.helpers.compose import DOC_COMMANDS, SECRET_NAMES

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "compose"
NODES = ("node-a", "node-b", "node-c")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def _envvars(command: click.Command) -> set[str]:
    names = {
        name
        for param in command.params
        for name in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
    }
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _envvars(sub)
    return names


def _invocations(command: list[str]) -> list[list[str]]:
    """Each `pulse ...` invocation of a service command (also inside `sh -c "a && b"`)."""
    if command[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in command[2].split("&&")]
    return [command]


def _resolve(argv: list[str]) -> click.Command:
    """Walk the click tree like the shell would; fail on unknown commands or options."""
    assert argv[0] == "pulse", argv
    current: click.Command = cli
    ctx = click.Context(cli)
    for token in argv[1:]:
        if token.startswith("-"):
            opt = token.split("=", 1)[0]
            known = {o for p in current.params for o in (*p.opts, *p.secondary_opts)}
            assert opt in known, f"{opt} is not an option of {current.name}"
        elif isinstance(current, click.Group):
            sub = current.get_command(ctx, token)
            assert sub is not None, f"{token!r} is not a pulse command"
            current = sub
    assert not isinstance(current, click.Group), f"{argv} names a group, not a command"
    return current


def test_services_and_health_checks(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgres", "redis", "init", *NODES, "prometheus"} <= set(services)
    for name in ("postgres", "redis"):
        check = services[name]["healthcheck"]
        assert check["test"] and check["interval"] and check["retries"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "redis-cli ping" in " ".join(services["redis"]["healthcheck"]["test"])
    assert services["prometheus"]["profiles"] == ["monitoring"]


def test_start_order(services: dict[str, dict[str, Any]]) -> None:
    init = services["init"]
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert init["depends_on"]["redis"]["condition"] == "service_healthy"
    assert init.get("restart") == "no"
    for name in NODES:
        depends = services[name]["depends_on"]
        assert depends["init"]["condition"] == "service_completed_successfully"


def test_commands_are_real_pulse_commands(services: dict[str, dict[str, Any]]) -> None:
    init_steps = _invocations(services["init"]["command"])
    assert [_resolve(step).name for step in init_steps] == ["init", "apply"]
    assert (REPO / init_steps[1][-1]).is_file()  # the job file ships in the image
    for name in NODES:
        assert _resolve(services[name]["command"]).name == "node"


def test_a_web_service_serves_the_api_and_console(services: dict[str, dict[str, Any]]) -> None:
    web = services["web"]
    assert _resolve(web["command"]).name == "web"
    assert web["depends_on"]["init"]["condition"] == "service_completed_successfully"
    bind = web["command"][web["command"].index("--bind") + 1]
    assert [p.rsplit(":", 1)[1] for p in web["ports"]] == [bind.rsplit(":", 1)[1]]
    assert "pulsecron[web,otel]" in (COMPOSE / "Dockerfile").read_text()


def test_environment_is_read_by_the_cli(services: dict[str, dict[str, Any]]) -> None:
    known = _envvars(cli)
    used = {
        key
        for service in services.values()
        for key in (service.get("environment") or {})
        if key.startswith("PULSE_")
    }
    assert used, "no PULSE_* variable is set"
    assert used <= known, f"not read by the CLI: {sorted(used - known)}"
    zones, ids = set(), set()
    for name in NODES:
        env = services[name]["environment"]
        assert {"PULSE_DATABASE_URL", "PULSE_REDIS_URL"} <= set(env)
        assert "@postgres:5432/" in env["PULSE_DATABASE_URL"]
        zones.add(env["PULSE_ZONE"])
        ids.add(env["PULSE_NODE_ID"])
        port = str(env["PULSE_METRICS_PORT"])
        assert [p.rsplit(":", 1)[1] for p in services[name]["ports"]] == [port]
    assert zones == {"a", "b", "c"} and len(ids) == 3


def test_ports_bind_to_loopback(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for mapping in service.get("ports", []):
            assert str(mapping).startswith("127.0.0.1:"), f"{name} publishes {mapping}"


def test_the_image_is_built_from_wheels_as_a_user_with_a_health_check() -> None:
    text = (COMPOSE / "Dockerfile").read_text()
    copies = re.findall(r"^COPY\s+(?!--from)(.+)$", text, flags=re.MULTILINE)
    sources = [src for line in copies for src in line.split()[:-1]]
    # The wheelhouse is what bin/compose makes; everything else comes from the tree.
    assert "build/compose/wheels" in sources
    assert all((REPO / src).exists() for src in sources if src != "build/compose/wheels")
    assert "--no-index" in text and "'pulsecron[web,otel]'" in text
    assert "pip install ." not in text, "the image installs the wheel, not the source tree"
    users = re.findall(r"^USER\s+(\S+)$", text, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK ", text, flags=re.MULTILINE)
    assert 'CMD ["pulse", "node"]' in text
    assert re.search(r"^WORKDIR /app$", text, flags=re.MULTILINE)


def test_the_build_context_holds_only_wheels_and_examples() -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {
        "!build/compose/wheels/*.whl",
        "!examples/",
    }


def test_images_are_pinned_and_logs_rotated(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image}"
        if name != "prometheus":
            assert service["logging"]["options"]["max-size"], name
    for name in (*NODES, "web", "postgres", "redis"):
        assert services[name]["deploy"]["resources"]["limits"]["memory"], name


def test_no_password_has_a_default(compose: dict[str, Any]) -> None:
    text = (COMPOSE / "compose.yaml").read_text()
    for var in re.findall(r"\$\{(\w*PASSWORD\w*)([^}]*)\}", text):
        assert var[1].startswith(":?"), f"{var[0]} has a default"
    redis = compose["services"]["redis"]
    assert "--requirepass" in " ".join(redis["command"])
    assert "REDIS_PASSWORD" in compose["x-pulse-env"]["PULSE_REDIS_URL"]


def test_the_database_owner_is_no_superuser(services: dict[str, dict[str, Any]]) -> None:
    postgres = services["postgres"]
    assert "POSTGRES_USER" not in postgres["environment"]  # the superuser stays `postgres`
    script = next(v for v in postgres["volumes"] if "docker-entrypoint-initdb.d" in v)
    text = (COMPOSE / script.split(":")[0]).read_text()
    assert "CREATE ROLE pulse LOGIN NOSUPERUSER" in text
    assert "CREATE DATABASE pulse OWNER pulse" in text


def test_prometheus_scrapes_the_nodes_and_rules_use_real_metrics(
    services: dict[str, dict[str, Any]],
) -> None:
    config = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    expected = {f"{n}:{services[n]['environment']['PULSE_METRICS_PORT']}" for n in NODES}
    assert targets == expected
    mounts = [v.split(":")[0] for v in services["prometheus"]["volumes"]]
    assert all((COMPOSE / m).is_file() for m in mounts)

    registry = build_registry(Stats(), lambda: NodeState("n", "z", 1), lambda: 0)
    exposed = {sample.name for family in registry.collect() for sample in family.samples} | {"up"}
    rules = yaml.safe_load((COMPOSE / "rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for metric in re.findall(r"\b(pulse_[a-z_]+|up)\b", rule["expr"]):
                assert metric in exposed, f"{metric} in {rule.get('record') or rule['alert']}"


def test_every_base_image_has_a_stand_in(services: dict[str, dict[str, Any]]) -> None:
    """Every image compose.yaml pins, the monitoring profile's too, can be made offline:
    bin/compose names a recipe in compose/base/ for it (built when no registry answers)."""
    script = (REPO / "bin" / "compose").read_text()
    recipes = dict(re.findall(r'"([\w./:-]+:[\w.-]+) (\w+)"', script))
    for name, service in services.items():
        image = service["image"]
        if image.startswith("${PULSE_IMAGE"):
            continue
        assert image in recipes, f"{name}: {image} has no stand-in in bin/compose"
        assert (COMPOSE / "base" / f"{recipes[image]}.Dockerfile").is_file(), image
    assert "prom/prometheus:v2.42.0" in recipes  # Debian bookworm's Prometheus is 2.42


SECRETS = {name: f"test-{name.lower()}" for name in SECRET_NAMES}


def _compose_v2() -> list[str]:
    """`docker compose` when Compose v2 or newer is installed; Compose v1 (Debian's
    docker-compose 1.29) cannot read the file's `name:` line, and bin/compose refuses it."""
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version", "--short"], capture_output=True, text=True
        )
        if probe.returncode == 0 and not probe.stdout.lstrip("v").startswith("1."):
            return [docker, "compose"]
    pytest.skip("no Compose v2 client installed; the file was checked by parsing")


def _config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_compose_v2(), "-f", str(COMPOSE / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"), **env},
        cwd="/",
    )


def test_docker_compose_config_accepts_the_file() -> None:
    result = _config(SECRETS)
    assert result.returncode == 0, result.stderr


def test_docker_compose_refuses_to_start_without_passwords() -> None:
    if (COMPOSE / ".env").exists():
        pytest.skip("compose/.env sets the passwords here")
    result = _config({k: v for k, v in SECRETS.items() if k != "PULSE_WEB_PASSWORD"})
    assert result.returncode != 0
    assert "PULSE_WEB_PASSWORD" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("POSTGRES_PASSWORD", "postgres", "well-known default"),
        ("REDIS_PASSWORD", "a@b", "only letters, digits"),
    ],
)
def test_bin_compose_refuses_default_and_unsafe_passwords(name: str, value: str, says: str) -> None:
    env = {**os.environ, **SECRETS, name: value}
    env.pop("PULSE_TRIAL", None)
    result = subprocess.run(
        [str(REPO / "bin" / "compose"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr and name in result.stderr
    assert value not in result.stderr


def test_nodes_and_web_log_in_through_their_roles(services: dict[str, dict[str, Any]]) -> None:
    def user(url: str) -> str:
        return url.split("//", 1)[1].split(":", 1)[0]

    init = services["init"]["environment"]
    assert "pulse init --roles" in services["init"]["command"][2]
    owner = user(init["PULSE_DATABASE_URL"])
    for name in NODES:
        assert user(services[name]["environment"]["PULSE_DATABASE_URL"]) == init["PULSE_NODE_LOGIN"]
    assert user(services["web"]["environment"]["PULSE_DATABASE_URL"]) == init["PULSE_WEB_LOGIN"]
    assert owner not in (init["PULSE_NODE_LOGIN"], init["PULSE_WEB_LOGIN"])


def test_the_end_to_end_test_runs_the_commands_the_page_shows() -> None:
    page = (REPO / "docs" / "compose.md").read_text()
    for command in DOC_COMMANDS:
        assert command in page, command

"""RunCardSender: the run's card (``contract/run_card.py``), built and sent from a daemon thread.

The training thread only hands over the config (``Tracking`` gets it) and says when the first step
is logged: an attribute set and an ``Event`` set. The thread builds the card (versions, the git
commit of the working folder with a 2 s timeout, the command line, nodes x GPUs, the model path,
the config made JSON with a note for what cannot be), redacts it, and once the first step is
logged PUTs it to ``/api/v1/runs/card`` with a credential for this run only (never the server's
token). A server that is down or slow is retried a few times with backoff, then given up with one
warning; a card the server refuses (4xx) is logged once. Nothing here raises into the trainer.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from verl_rl_insight.contract import environment, paths, run_credential, server_url
from verl_rl_insight.contract.http_client import HttpClient
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES, Json, plain, redact_argv, redact_card

if TYPE_CHECKING:
    from verl_rl_insight.trainer.config import ServerUrl

logger = logging.getLogger("verl_rl_insight")

GIT_TIMEOUT_S = 2.0
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def git_state(folder: str, timeout_s: float = GIT_TIMEOUT_S) -> dict[str, Json] | None:
    """``{"commit", "dirty"}`` of the git work tree ``folder`` is in (``dirty`` None when git could
    not tell in time); None without git or a repository. Takes no lock in the user's repository."""
    git = ["git", "--no-optional-locks", "-C", folder]
    try:
        commit = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.SubprocessError):  # no git, a slow file system
        return None
    if commit.returncode != 0:
        return None
    try:
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        dirty: bool | None = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):  # a large work tree: the commit is still known
        dirty = None
    return {"commit": commit.stdout.strip(), "dirty": dirty}


_REFERENCE = re.compile(r"\$\{(?:oc\.select:)?(\.*)([A-Za-z_][A-Za-z0-9_.]*)(?:,[^{}]*)?\}")


def _source(raw: object, parent: list[str]) -> str | None:
    """The key a value of verl's config copies (``${a.b}``, ``${oc.select:a.b,default}``, ``${.x}``)."""
    found = _REFERENCE.fullmatch(raw) if isinstance(raw, str) else None
    if found is None:
        return None
    dots, path = found.groups()
    if not dots:
        return path
    up = len(dots) - 1  # ``.x``: a sibling; ``..x``: the parent's sibling
    return ".".join([*parent[: len(parent) - up], path]) if up <= len(parent) else None


def verl_derived_keys() -> dict[str, str]:
    """{key: the key its value copies} in verl's own trainer configs (``_generated_*.yaml`` of the
    installed verl, read as YAML, verl not imported): the keys that change with another by nature,
    which ``runs diff`` tells apart."""
    import yaml

    spec = importlib.util.find_spec("verl")  # its folder, without importing it
    if spec is None or not spec.submodule_search_locations:
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    derived: dict[str, str] = {}
    folders = [Path(p) / "trainer" / "config" for p in spec.submodule_search_locations]
    for path in sorted(p for folder in folders for p in folder.glob("_generated_*.yaml")):
        todo: list[tuple[object, list[str]]] = [(yaml.load(path.read_text(), Loader=loader), [])]
        while todo:
            node, parent = todo.pop()
            if not isinstance(node, dict):
                continue
            for key, value in node.items():
                where = [*parent, str(key)]
                source = _source(value, parent)
                if source:
                    derived.setdefault(".".join(where), source)
                else:
                    todo.append((value, where))
    return derived


def _select(config: Json, path: str) -> Json:
    for part in path.split("."):
        if not isinstance(config, dict):
            return None
        config = config.get(part)
    return config


_INNER = re.compile(r"\$\{([^{}]*)\}")  # a reference with none inside it (the innermost first)
_PATH = re.compile(r"(\.*)([A-Za-z_][A-Za-z0-9_.]*)")


def _scalar(text: str) -> Json:
    """A default of ``${oc.select:key,default}`` as YAML reads a scalar."""
    text = text.strip()
    words: dict[str, Json] = {"null": None, "~": None, "true": True, "false": False}
    if text.lower() in words:
        return words[text.lower()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text in ("[]", "{}"):
        return [] if text == "[]" else {}
    return text.strip("'\"")


def _lookup(body: str, config: Json, parent: list[str]) -> tuple[bool, Json]:
    """(found, value) of one reference's body: ``a.b``, ``.x``, ``oc.select:a.b,default``; another
    resolver (``oc.env``...) is not found: it stays as written."""
    select = body.startswith("oc.select:")
    key, comma, default = body[len("oc.select:") :].partition(",") if select else (body, "", "")
    path = _PATH.fullmatch(key.strip())
    if path is None:
        return False, None
    dots, name = path.groups()
    up = len(dots) - 1
    if dots and up > len(parent):
        return False, None
    where = ".".join([*parent[: len(parent) - up], name]) if dots else name
    if not _missing(config, where):
        return True, _select(config, where)
    return (True, _scalar(default)) if select and comma else (False, None)


def _resolve_text(text: str, config: Json, parent: list[str]) -> tuple[Json, bool]:
    """``text`` with its references put in place (a whole-string reference: the value itself)."""
    changed, start = False, 0
    while (found := _INNER.search(text, start)) is not None:
        ok, value = _lookup(found.group(1), config, parent)
        if ok and found.start() == 0 and found.end() == len(text) and not (isinstance(value, str) and "${" in value):
            return value, True  # the value itself (a block: its own references resolved in the next pass)
        if not ok or (isinstance(value, str) and "${" in value) or isinstance(value, (dict, list)):
            start = found.end()  # left as written (or not resolved yet: a later pass)
            continue
        text = text[: found.start()] + str(value) + text[found.end() :]
        changed, start = True, 0
    return text, changed


def resolve_references(config: Json, passes: int = 8) -> Json:
    """The config with each reference (``${a.b}``, ``${oc.select:a.b,default}``, ``${..x}``, also
    inside text: ``checkpoints/${trainer.project_name}``) put in its place, as OmegaConf's
    ``resolve=True`` would, for a config handed over unresolved (the demo's); another resolver
    (``${oc.env:...}``) stays as written."""

    def walk(node: Json, parent: list[str]) -> tuple[Json, bool]:
        if isinstance(node, dict):
            changed = False
            out: dict[str, Json] = {}
            for key, value in node.items():
                out[key], moved = walk(value, [*parent, key])
                changed = changed or moved
            return out, changed
        if isinstance(node, list):
            items = [walk(v, parent) for v in node]
            return [v for v, _ in items], any(moved for _, moved in items)
        if isinstance(node, str) and "${" in node:
            return _resolve_text(node, config, parent[:-1])
        return node, False

    for _ in range(passes):  # a reference to a reference: resolved over passes
        config, changed = walk(config, [])
        if not changed:
            break
    return config


def _missing(config: Json, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(config, dict) or part not in config:
            return True
        config = config[part]
    return False


def secrets_known(token: str | None, environ: Mapping[str, str]) -> list[str]:
    """The secret values this process knows: the server's token, RL_INSIGHT_TOKEN, the URL's password."""
    found = [token or "", environ.get(environment.TOKEN, "")]
    url = environ.get(environment.SERVER_URL)
    if url:
        try:
            found.append(server_url.split(url)[1] or "")
        except ValueError:
            pass
    return [s for s in found if s]


def _derived_keys_or_none(notes: list[str]) -> dict[str, str]:
    try:
        return verl_derived_keys()
    except Exception as exc:  # a verl whose config files cannot be read: the diff shows every key
        notes.append(f"derived keys unknown ({type(exc).__name__})")
        return {}


def build_card(
    project: str,
    experiment: str,
    config: object,
    secrets: list[str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Json]:
    """The card, redacted: everything but what fails is in it (``notes`` says what failed)."""
    environ = os.environ if environ is None else environ
    notes: list[str] = []
    try:
        plain_config = resolve_references(plain(config, notes)) if config is not None else None
    except Exception as exc:  # a mapping that breaks while read: what can be is sent
        notes.append(f"config could not be read ({type(exc).__name__})")
        plain_config = None
    command: object
    try:  # the driver's command line (verl's trainer runs in a Ray actor), else this process's
        command = json.loads(environ[environment.COMMAND]) if environ.get(environment.COMMAND) else list(sys.argv)
    except ValueError:
        command = list(sys.argv)
    folder = environ.get(environment.WORKDIR) or os.getcwd()
    card: dict[str, Json] = {
        "project": project,
        "experiment_name": experiment,
        "created": time.time(),
        "versions": {
            "verl": _version("verl"),
            "verl_rl_insight": _version("verl-rl-insight"),
            "python": platform.python_version(),
        },
        "git": git_state(folder) if os.path.isdir(folder) else None,
        "command": list(redact_argv([str(a) for a in command], secrets)) if isinstance(command, list) else None,
        "nodes": _select(plain_config, "trainer.nnodes"),
        "gpus_per_node": _select(plain_config, "trainer.n_gpus_per_node"),
        "model": _select(plain_config, "actor_rollout_ref.model.path"),
        "config": plain_config,
        "derived": dict(_derived_keys_or_none(notes)),
        "notes": list(notes),
    }
    card = redact_card(card, secrets)
    if len(json.dumps(card)) > MAX_CARD_BYTES:
        card["config"] = None
        card["notes"] = [*notes, f"config left out: the card is over {MAX_CARD_BYTES // 1024} KiB"]
    return card


class RunCardSender:
    """Builds the card of one run off the training thread and sends it once, after ``first_log``."""

    def __init__(
        self,
        server: ServerUrl,
        project: str,
        experiment: str,
        config: object,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = server.at(paths.RUN_CARD)
        self.project, self.experiment = project, experiment
        self.retry_delays_s = retry_delays_s
        self.timeout_s = timeout_s
        self.state = "building"  # building -> waiting -> sending -> sent | refused | gave up | failed
        self.card: dict[str, Json] | None = None
        token = server.token
        self._secrets = secrets_known(token, os.environ)
        if token and not run_credential.is_run_credential(token):  # the card writes this run only
            token = run_credential.mint(token, project, experiment)
        self._client = HttpClient(token)
        self._config = config
        self._logged = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-insight-run-card", daemon=True)
        self._thread.start()

    def first_log(self) -> None:
        """The run logged a step: the card goes out now (called on the training thread: an Event)."""
        self._logged.set()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop retrying; a send under way may finish within ``timeout_s``."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            self.card = build_card(self.project, self.experiment, self._config, self._secrets)
            self._config = None
            self.state = "waiting"
            while not self._logged.wait(0.5):
                if self._stop.is_set():
                    self.state = "not sent: no step was logged"
                    return
            self.state = "sending"
            body = json.dumps(self.card, allow_nan=False)
            for delay in (*self.retry_delays_s, None):
                if self._send(body):
                    return
                if delay is None or self._stop.wait(delay):
                    break
            self.state = "gave up"
            logger.warning("rl-insight: the run's card did not reach %s; training goes on without it", self.url)
        except Exception:
            self.state = "failed"
            logger.exception("rl-insight: the run's card could not be built; training goes on")

    def _send(self, body: str) -> bool:
        """True when done (sent, or refused for good); False to retry."""
        try:
            reply = self._client.request("PUT", self.url, data=body, timeout_s=self.timeout_s)
        except Exception:  # unreachable: retried
            return False
        if reply.ok:
            self.state = "sent"
            return True
        if reply.status in (400, 413, 422):
            self.state = "refused"
            logger.warning("rl-insight: the server refused the run's card (%s): %s", reply.status, reply.error())
            return True
        return False  # 401, 403, 404 (an older server), 409, 429, 5xx: maybe later

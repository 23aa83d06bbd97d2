"""Run credentials: what trainers and Ray workers carry instead of the server's token.

A run credential is ``run1.<payload>.<signature>``: the payload names one project, one
experiment and an expiry; the signature is an HMAC keyed by the server's token. The driver mints
one from the token it was given (no request to the server, so a server that is down delays
nothing) and hands only it to the Ray workers, whose environment verl prints. The server checks
the signature with its token: the credential writes that run's metrics, targets, spans and
profile reports, and nothing else; it reads nothing. It expires (``RUN_CREDENTIAL_DAYS``); the
server revokes one run's credentials minted before a time (``rl-insight runs revoke``: the payload
carries when it was minted), and changing the server's token revokes every one at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from verl_rl_insight.contract.errors import Forbidden
from verl_rl_insight.contract.runs import Run


class NamedRun(NamedTuple):
    """A run a request names, for the run gate: as given (not checked yet), and where it names it."""

    project: object
    experiment: object  # its experiment_name
    where: str  # the field of the request that names them


RunCheck = Callable[[Iterable[NamedRun]], None]  # the API's run gate (server/api/run_gate.py), as a parser sees it

PREFIX = "run1."
RUN_CREDENTIAL_DAYS = 30.0


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(token: str) -> bytes:
    return hmac.new(token.encode(), b"rl-insight run credential", hashlib.sha256).digest()


def _sign(token: str, payload: str) -> str:
    return _b64(hmac.new(_key(token), payload.encode(), hashlib.sha256).digest())


def is_run_credential(value: str | None) -> bool:
    return bool(value) and str(value).startswith(PREFIX)


def mint(token: str, project: str, experiment: str, days: float = RUN_CREDENTIAL_DAYS, now: float | None = None) -> str:
    """A credential for ``project`` / ``experiment``, valid ``days`` from ``now`` (this node's clock)."""
    now = time.time() if now is None else now
    payload = _b64(json.dumps([project, experiment, int(now + days * 86400), round(now, 3)]).encode())
    return f"{PREFIX}{payload}.{_sign(token, payload)}"


def claimed_run(credential: str) -> Run | None:
    """The run a credential names, read without its signature (only the server, holding the token,
    can check that): what a reader scopes itself to before the server has said yes. None when
    ``credential`` is no run credential or its payload is damaged."""
    if not is_run_credential(credential):
        return None
    payload = credential[len(PREFIX) :].partition(".")[0]
    try:
        named = json.loads(_unb64(payload))
    except ValueError:  # bad base64 (binascii.Error), bad UTF-8, bad JSON
        return None
    if not isinstance(named, list) or len(named) < 2 or not all(isinstance(n, str) for n in named[:2]):
        return None
    return named[0], named[1]


def credential_id(credential: str) -> str:
    """What the server remembers of a credential it has seen (a digest of its signature: not the
    credential itself)."""
    return hashlib.sha256(credential.rpartition(".")[2].encode()).hexdigest()[:32]


def verify(
    token: str,
    credential: str,
    now: float | None = None,
    revoked: Callable[[str, str], float | None] | None = None,
    refusal: Callable[[str, str, float, str], str | None] | None = None,
) -> Run:
    """(project, experiment) of a credential signed with ``token``; Forbidden when it is not, has
    expired, was minted before ``revoked(project, experiment)``, or when ``refusal(project,
    experiment, minted, credential_id)`` (the server's revocations, by its own clock) says why not."""
    _, _, rest = credential.partition(PREFIX)
    payload, _, signature = rest.partition(".")
    if not payload or not hmac.compare_digest(signature.encode(), _sign(token, payload).encode()):
        raise Forbidden("run credential not signed by this server's token (rotated since it was made?)")
    try:
        project, experiment, expires, *minted = json.loads(_unb64(payload))
        issued = float(minted[0]) if minted else float(expires) - RUN_CREDENTIAL_DAYS * 86400
    except (ValueError, TypeError, IndexError):
        raise Forbidden("run credential is damaged") from None
    if (time.time() if now is None else now) > float(expires):
        raise Forbidden(
            f"run credential for {project}/{experiment} expired at "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(float(expires)))}; restart the job to get a new one"
        )
    if refusal is not None:
        reason = refusal(str(project), str(experiment), issued, credential_id(credential))
        if reason is not None:
            raise Forbidden(f"run credential for {project}/{experiment} {reason}")
    at = revoked(str(project), str(experiment)) if revoked is not None else None
    # a mint time is kept to the millisecond, rounded: one within that of the revocation counts as before it
    if at is not None and issued <= at + 0.001:
        raise Forbidden(
            f"run credential for {project}/{experiment} was revoked at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))}; a job started since then carries a new one"
        )
    return str(project), str(experiment)


OTHER_RUN = "this run credential writes"  # a 403 for one part (a batch) naming another run, not the credential


def check_run(scope: Run | None, project: object, experiment: object, where: str) -> None:
    """Forbidden when a run credential for ``scope`` writes to another run (``None``: the token)."""
    if scope is not None and (project, experiment) != scope:
        raise Forbidden(
            f"{where}: {OTHER_RUN} {scope[0]}/{scope[1]} only, not {str(project)[:100]}/{str(experiment)[:100]}"
        )

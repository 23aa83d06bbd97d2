"""Who is calling: the token lets everything through, a run credential (what Ray workers carry)
only the routes open to run credentials, for its own run (its run gate checks that: run_gate.py);
else 401 / 403."""

import base64
import binascii
import hmac

from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.errors import Forbidden, Unauthorized
from verl_rl_insight.server.api.access import Access
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.stores.revocations import Revocations

MISSING = (
    "missing or wrong token (Authorization: Bearer <token>; the URL that `rl-insight server start` prints carries it)"
)


def _given(request: Request) -> str | None:
    """The credential sent, as ``Authorization: Bearer <it>`` or HTTP Basic with it as the password."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(credentials.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


class Authenticator:
    def __init__(self, token: str | None, revocations: Revocations) -> None:
        self.token = token or None
        self.revocations = revocations

    def authorize(self, request: Request, access: Access) -> None:
        """Let ``request`` through for a route of ``access``; sets ``request.run`` for a run credential."""
        if self.token is None or access is Access.ANYONE:
            return
        given = _given(request)
        if run_credential.is_run_credential(given):
            run = run_credential.verify(self.token, str(given), refusal=self.revocations.refusal)
            if access is not Access.RUN_CREDENTIAL:
                raise Forbidden(
                    f"a run credential (what trainers carry) may not {request.method} {request.path}: "
                    "it writes its run only"
                )
            request.run = run
            return
        if given is None or not hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode()):
            raise Unauthorized(MISSING)

"""Redaction: what a run card (its config, its command line) must not carry, masked as ``***``.

The same rules run twice: in the trainer before the card leaves its process, and in the server on
receipt (a card from an older or a hand-made client). They mask by key and by shape:

- by key: the value of a key that names a secret (a word token, key, secret, password, pw, pwd,
  bearer, cookie, creds, pat, signature, auth...: ``hf_token``, ``github_pat``, ``aws_creds``,
  ``Authorization``), when it is text or a block (a number or a flag is not a secret); verl's
  ``*_key`` keys that hold a dataset column (``data.prompt_key: prompt``) are not secrets;
- in any text, a list's included: ``NAME=VALUE`` and ``NAME: VALUE`` under such a name
  (``WANDB_API_KEY=...`` in an ``env_vars`` list, ``export HF_TOKEN=...`` in ``bash -c``,
  ``Authorization: Bearer ...``), ``Bearer``/``Basic`` credentials, a URL's user info (a password
  with ``/`` or ``@`` in it too) and its secret-looking query parameters (``?token=``,
  ``X-Amz-Signature=``, ``sig=``), PEM blocks, tokens of a known shape (``hf_``, ``ghp_``,
  ``github_pat_``, ``sk-``, ``xox?-``, ``AKIA``, JWTs), and long high-entropy words (24+ letters
  and digits, both cases, about 4 bits a character);
- on a command line, and in any list of text: a flag that names a secret masks the next argument
  (``--token X``, ``--header X`` when X is a secret header), ``--flag=X`` and a Hydra override
  (``trainer.wandb_api_key=X``, ``+x.hf_token=X``) mask their value;
- each secret the caller knows (the server's token, the URL's password) and any run credential.

Paths, model names, numbers and Hydra overrides of ordinary keys are left as they are
(``tests/data/redaction_corpus.json`` holds both kinds).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

from verl_rl_insight.contract.run_credential import PREFIX as RUN_CREDENTIAL_PREFIX

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]

MASK = "***"
_SECRET_WORDS = frozenset(
    {
        "token", "key", "secret", "secrets", "password", "passwd", "passphrase", "apikey", "credential",
        "credentials", "bearer", "cookie", "cookies", "pw", "pwd", "creds", "cred", "pat", "signature", "sig",
        "jwt", "privatekey",
    }
)  # fmt: skip
_SECRET_PARTS = ("password", "passwd", "secret", "apikey", "api_key", "accesskey", "access_key", "github_pat")
# verl's own keys that end in ``_key`` and name a dataset column (``data.prompt_key: prompt``):
# not secrets while their value is a column name
COLUMN_KEYS = frozenset({"prompt_key", "reward_fn_key", "image_key", "video_key", "audio_key", "teacher_key"})
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_WORDS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# a value that is a number or a flag: no secret (``ppo_max_token_len_per_gpu=16384``)
_PLAIN_VALUE = re.compile(r"-?[0-9][0-9_]*(\.[0-9]*)?([eE][-+]?[0-9]+)?|true|false|True|False|null|None|")
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_QUOTED_OR_WORD = r"\"[^\"]*\"|'[^']*'|[^\s,;&'\"}\]]+"
_ASSIGNMENT = re.compile(rf"(?<![A-Za-z0-9_.\-])({_NAME})=({_QUOTED_OR_WORD})")
# ``Name: value`` to the end of the line or of the quoted text (``Authorization: Bearer abc``)
_COLON = re.compile(rf"(?<![A-Za-z0-9_.\-/])[\"']?({_NAME})[\"']?(\s*:[ \t]*)(\"[^\"]*\"|'[^']*'|[^\r\n,;}}'\"]+)")
_SCHEME_CREDENTIAL = re.compile(r"\b(Bearer|Basic|Digest|Token)\s+[A-Za-z0-9._~+/=\-]{6,}", re.IGNORECASE)
# scheme://, then user info up to the LAST @ of the word (a password may hold / and @)
_USER_INFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)(?:[^\s@'\"<>]*:[^\s'\"<>]*|[^/?#@\s'\"<>]*)@")
_QUERY = re.compile(r"([?&;])([A-Za-z0-9_.\-]+)=([^&#\s'\"]*)")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----(?:.*?-----END [A-Z0-9 ]+-----|.*\Z)", re.DOTALL)
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_\-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|glpat-[A-Za-z0-9_\-]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"
)
_LONG_WORD = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{24,}={0,2}")
MIN_ENTROPY_BITS = 4.0  # per character: a random 24+ character word of letters and digits has about 4.3+
_SECRET_FLAGS = frozenset({"-H", "--header", "-u", "--user", "--netrc"})  # curl's, wget's


def secret_key(name: str) -> bool:
    """True for a key that names a secret: a word token / key / secret / password / pw / bearer /
    cookie / creds / auth... (``hf_token``, ``wandb_api_key``, ``github_pat``, ``Authorization``),
    not ``tokenizer``."""
    lowered = name.lower()
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    words = [w.lower() for w in _WORDS.split(name) if w]
    return any(w in _SECRET_WORDS or w.startswith("auth") for w in words)


def _secret_value(name: str, value: str) -> bool:
    """Whether ``value`` under ``name`` is masked: a secret-named key, not a number or a flag, not
    a column name under one of verl's column keys."""
    last = name.rsplit(".", 1)[-1]
    if not secret_key(last) or _PLAIN_VALUE.fullmatch(value.strip("\"'")) is not None:
        return False
    return not (last in COLUMN_KEYS and _COLUMN.fullmatch(value.strip("\"'")) is not None)


def _high_entropy(word: str) -> bool:
    """A word that looks random: letters of both cases and digits, about 4 bits a character (a
    git commit's 40 hex digits are 4 bits at most and have one case: kept)."""
    letters = word.rstrip("=")
    if not all(any(test(c) for c in letters) for test in (str.isupper, str.islower, str.isdigit)):
        return False
    counts = Counter(letters)
    entropy = -sum(n / len(letters) * math.log2(n / len(letters)) for n in counts.values())
    return entropy >= MIN_ENTROPY_BITS


def _random_word(match: re.Match[str]) -> str:
    """``***`` for a long word that looks random; a path's parts (``/`` without base64's ``+`` or
    ``=``) are judged one by one."""
    word = match.group(0)
    if "/" in word and "+" not in word and not word.endswith("="):
        return "/".join(MASK if len(part) >= 24 and _high_entropy(part) else part for part in word.split("/"))
    return MASK if _high_entropy(word) else word


def _colon(match: re.Match[str]) -> str:
    """``Name: ***`` where the name is a secret's (``Authorization: Bearer X``)."""
    if not _secret_value(match.group(1), match.group(3)):
        return match.group(0)
    return match.group(0)[: match.start(3) - match.start(0)] + MASK


def _query(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK}" if value and secret_key(name) else match.group(0)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret of a known shape, each of ``secrets`` and any run credential
    replaced by ``***`` (the module's docstring lists the shapes)."""
    text = _PEM.sub(MASK, text)
    text = _USER_INFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _QUERY.sub(_query, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}" if _secret_value(*m.groups()) else m.group(0), text)
    text = _COLON.sub(_colon, text)
    text = _KNOWN_TOKENS.sub(MASK, text)
    text = _LONG_WORD.sub(_random_word, text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    if RUN_CREDENTIAL_PREFIX in text:
        text = re.sub(re.escape(RUN_CREDENTIAL_PREFIX) + r"[A-Za-z0-9_\-.]+", MASK, text)
    return text


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line (or any list of text) with secrets masked: a Hydra override or ``--flag=X``
    of a secret-named key (``a.b.hf_token=X``, ``--api-key=X``), the argument after a flag naming a
    secret (``--token X``), and the secrets inside any argument (``-H 'Authorization: Bearer X'``,
    ``bash -c 'export HF_TOKEN=X; ...'``)."""
    known = tuple(secrets)
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK if _PLAIN_VALUE.fullmatch(arg) is None else arg)
            mask_next = False
            continue
        name, eq, value = arg.partition("=")
        bare = name.lstrip("+~-")
        if eq and bare and not any(c.isspace() for c in name) and _secret_value(bare, value):
            out.append(f"{name}={MASK}")
        elif arg.startswith("-") and not eq and arg not in _SECRET_FLAGS and secret_key(arg.lstrip("-")):
            out.append(arg)
            mask_next = True
        else:
            out.append(redact_text(arg, known))
    return out


def redact(value: Json, secrets: Iterable[str] = (), key: str = "") -> Json:
    """A copy of ``value`` with every secret masked: the value of a secret-named key when it is
    text or a block (a number or a flag is not a secret), and secrets inside any text; a list of
    text is read as a command line too (``["--token", "X"]``)."""
    known = tuple(secrets)
    column = key in COLUMN_KEYS and isinstance(value, str) and _COLUMN.fullmatch(value) is not None
    if key and not column and secret_key(key) and isinstance(value, (str, list, dict)) and value not in ("", [], {}):
        return MASK
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return list(redact_argv([str(v) for v in value], known))
        return [redact(v, known) for v in value]
    if isinstance(value, dict):
        return {k: redact(v, known, k) for k, v in value.items()}
    return value


def redact_card(card: Mapping[str, Json], secrets: Iterable[str] = ()) -> dict[str, Json]:
    """A card with every secret masked, its command line read as one; its ``derived`` (key -> key)
    is names, not values: only the text in it is searched for secrets, a token-named key is kept."""
    known = tuple(secrets)
    derived = card.get("derived")
    out = {k: redact(v, known, k) for k, v in card.items() if k != "derived"}
    if isinstance(derived, dict):
        out["derived"] = {redact_text(k, known): redact(v, known) for k, v in derived.items()}
    elif "derived" in card:
        out["derived"] = redact(derived, known)
    return out

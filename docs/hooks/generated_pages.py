"""mkdocs hook: the CLI reference from the argparse parser and the HTTP API from the OpenAPI document
the server serves, written into their pages at build time, so neither can drift from the code."""

from __future__ import annotations

import argparse
import json

MARK_CLI = "<!-- generated: cli -->"
MARK_API = "<!-- generated: http-api -->"


def _parsers(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{path} {name}")
    return found


def cli_reference() -> str:
    from verl_rl_insight.commands import build_parser

    out = []
    for path, parser in _parsers(build_parser(), "rl-insight"):
        parser.prog = path
        out.append(f"## `{path}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(out)


def http_api() -> str:
    from verl_rl_insight.server.api.openapi import document
    from verl_rl_insight.server.api.routes import ROUTES

    doc = document(ROUTES)
    out = []
    for path, operations in sorted(doc.get("paths", {}).items()):
        for method, operation in sorted(operations.items()):
            summary = str(operation.get("summary") or operation.get("description") or "").strip()
            out.append(f"### `{method.upper()} {path}`\n\n{summary}\n")
    out.append("## The whole document\n\n```json\n" + json.dumps(doc, indent=1)[:200_000] + "\n```\n")
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: object) -> str:
    if MARK_CLI in markdown:
        markdown = markdown.replace(MARK_CLI, cli_reference())
    if MARK_API in markdown:
        markdown = markdown.replace(MARK_API, http_api())
    return markdown

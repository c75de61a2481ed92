"""Writes ``docs/api-reference.md`` from the CRDs in ``crds/``: every field of the Experiment and the Trial
with its type, bounds, default and the description ``kubectl explain`` shows, rendered by jsonschema2md.

Run by ``make docs`` after a CRD changes; ``tests/unit/test_docs.py`` fails while the file is stale. The
CRDs stay the one source of the descriptions: this file is generated, never edited by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jsonschema2md
import yaml

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api-reference.md"
CRDS = ("experiments.kubetune.io.yaml", "trials.kubetune.io.yaml")


def render() -> str:
    """The reference as Markdown: a heading per kind, then its fields as nested lists."""
    parts = [
        "# API reference (generated)\n\n",
        "Generated from `crds/` by `make docs` (`docs/api_reference.py`); do not edit. The same text is what\n",
        "`kubectl explain experiment.spec` and `kubectl explain trial.status` print. Examples: [api.md](api.md).\n\n",
    ]
    parser = jsonschema2md.Parser(show_examples="all", header_level=1)
    for name in CRDS:
        crd = yaml.safe_load((ROOT / "crds" / name).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = dict(version["schema"]["openAPIV3Schema"], title=f"{kind} ({group}/{version['name']})")
            parts += parser.parse_schema(schema)
            parts.append("\n")
    return "".join(parts).rstrip() + "\n"


def main() -> int:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

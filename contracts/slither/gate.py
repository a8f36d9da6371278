"""The gate over slither's findings (run by scripts/slither, with slither's own venv's python).

    gate.py check RESULTS TRIAGE   exit 1 on a finding not in TRIAGE, a "fixed" one that is back,
                                   or an "accepted" one slither no longer reports (stale)
    gate.py table RESULTS TRIAGE   the findings and verdicts as a markdown table (for SECURITY.md)

RESULTS is slither's `--json` output; TRIAGE is contracts/slither/triage.json:
    {"findings": [{"id", "detector", "where", "verdict": "accepted" | "fixed", "reason"}, ...]}

A finding's id is stable across edits that only move code: it is
`<detector>:<where>:<hash>`, where `where` names the first element slither reports (contract,
function with its signature, or a contract) and `hash` is the first 10 hex digits of the sha256
of every element's kind, name and enclosing function and contract (a statement's source text,
not its line). Slither's own `id` hashes line numbers in, so it changes whenever code above a
finding moves; this one changes only when the finding itself does.
"""

import hashlib
import json
import sys

VERDICTS = ("accepted", "fixed")


def _parent(element, kind):
    """The enclosing element of type `kind` ("function" or "contract"), or None."""
    parent = element.get("type_specific_fields", {}).get("parent")
    while parent is not None:
        if parent.get("type") == kind:
            return parent
        parent = parent.get("type_specific_fields", {}).get("parent")
    return None


def _qualified(function):
    """`Contract.signature` of a function element (or `Contract.name` without a signature)."""
    fields = function.get("type_specific_fields", {})
    name = fields.get("signature") or function.get("name")
    contract = _parent(function, "contract")
    return f"{contract['name']}.{name}" if contract else name


def _describe(element):
    """One element without its source position: kind, text and where it is."""
    kind = element.get("type")
    if kind == "function":
        return f"function {_qualified(element)}"
    if kind == "contract":
        return f"contract {element.get('name')}"
    function = _parent(element, "function")
    if function is not None:
        return f"{kind} {element.get('name')} in {_qualified(function)}"
    contract = _parent(element, "contract")
    inside = f" in {contract['name']}" if contract else ""
    return f"{kind} {element.get('name')}{inside}"


def _where(element):
    """The readable location of a finding: its first element's function or contract."""
    kind = element.get("type")
    if kind == "function":
        return _qualified(element)
    if kind == "contract":
        return element.get("name")
    function = _parent(element, "function")
    if function is not None:
        return _qualified(function)
    contract = _parent(element, "contract")
    return f"{contract['name']}.{element.get('name')}" if contract else element.get("name")


def findings(results_file):
    """The slither findings of RESULTS as dicts with id, detector, where, impact, description."""
    with open(results_file, encoding="utf8") as f:
        data = json.load(f)
    if not data.get("success"):
        sys.exit(f"slither: the analysis failed: {data.get('error')}")
    out = []
    for result in data.get("results", {}).get("detectors", []):
        elements = result.get("elements", [])
        canonical = "\n".join([result["check"]] + [_describe(e) for e in elements])
        digest = hashlib.sha256(canonical.encode("utf8")).hexdigest()[:10]
        where = _where(elements[0]) if elements else "-"
        out.append(
            {
                "id": f"{result['check']}:{where}:{digest}",
                "detector": result["check"],
                "where": where,
                "impact": result.get("impact"),
                "confidence": result.get("confidence"),
                "description": result.get("description", "").strip(),
                "first_line": (result.get("first_markdown_element") or "").strip(),
            }
        )
    return out


def triage(triage_file):
    """The triage entries by id, checked for shape."""
    with open(triage_file, encoding="utf8") as f:
        entries = json.load(f)["findings"]
    by_id = {}
    for entry in entries:
        missing = [k for k in ("id", "detector", "where", "verdict", "reason") if not entry.get(k)]
        if missing:
            sys.exit(f"slither: {triage_file}: an entry lacks {', '.join(missing)}: {entry}")
        if entry["reason"].strip().upper().startswith("TODO"):
            sys.exit(f"slither: {triage_file}: {entry['id']}: the reason is still a TODO; say why it is safe, or fix it")
        if entry["verdict"] not in VERDICTS:
            sys.exit(f"slither: {triage_file}: {entry['id']}: verdict must be one of {VERDICTS}")
        if entry["id"] in by_id:
            sys.exit(f"slither: {triage_file}: {entry['id']} is listed twice")
        by_id[entry["id"]] = entry
    return by_id


def check(results_file, triage_file):
    found = findings(results_file)
    known = triage(triage_file)
    found_ids = {f["id"] for f in found}
    new = [f for f in found if f["id"] not in known]
    back = [f for f in found if f["id"] in known and known[f["id"]]["verdict"] == "fixed"]
    stale = [e for i, e in known.items() if e["verdict"] == "accepted" and i not in found_ids]

    for f in new:
        print(f"slither: NEW finding, not triaged: {f['id']} ({f['impact']}, {f['confidence']} confidence)")
        print("    " + f["description"].replace("\n", "\n    "))
    if new:
        print(
            f"slither: {len(new)} new finding(s). Read each in the source: fix the contract, or triage it by\n"
            f"    adding an entry to {triage_file} (\"verdict\": \"accepted\" with the reason it is safe).\n"
            "    The entries to fill in:"
        )
        for f in new:
            entry = {
                "id": f["id"],
                "detector": f["detector"],
                "where": f["where"],
                "verdict": "accepted",
                "reason": "TODO: why this is safe, or fix it",
            }
            print("    " + json.dumps(entry) + ",")
    for f in back:
        print(f"slither: a finding triaged as fixed is back: {f['id']}")
        print("    " + f["description"].replace("\n", "\n    "))
    for e in stale:
        print(
            f"slither: triaged as accepted but no longer reported: {e['id']}; if the code was fixed, "
            f"set its verdict to \"fixed\" (and its reason to the fix) in {triage_file}, or remove it"
        )
    fixed = sum(1 for e in known.values() if e["verdict"] == "fixed")
    print(
        f"slither: {len(found)} finding(s) in {len({f['detector'] for f in found})} detector(s); "
        f"triaged: {len(known)} ({fixed} fixed); new: {len(new)}, fixed but back: {len(back)}, stale: {len(stale)}"
    )
    return 1 if new or back or stale else 0


def table(results_file, triage_file):
    found = {f["id"]: f for f in findings(results_file)}
    known = triage(triage_file)
    print("| Detector | Impact | Where | Verdict | Reason |")
    print("| --- | --- | --- | --- | --- |")
    for entry in known.values():
        f = found.get(entry["id"])
        impact = f"{f['impact']}" if f else "-"
        reason = entry["reason"].replace("|", "\\|")
        print(f"| {entry['detector']} | {impact} | `{entry['where']}` | {entry['verdict']} | {reason} |")
    for i, f in found.items():
        if i not in known:
            print(f"| {f['detector']} | {f['impact']} | `{f['where']}` | **untriaged** | |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("check", "table"):
        sys.exit(__doc__)
    command, results, triage_path = sys.argv[1:]
    sys.exit(check(results, triage_path) if command == "check" else table(results, triage_path))

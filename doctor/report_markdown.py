"""The report document as GitHub-flavoured Markdown: the verdict first, long parts folded.

Size is bounded: when the rendering is over `MAX_MARKDOWN_BYTES`, excerpts are shortened step by
step (tail, then context, then the excerpts themselves) and the report says what was cut.
"""
from __future__ import annotations

import json
import re
from typing import Any

from doctor.report import MAX_CELL, MAX_MARKDOWN_BYTES, final_pass

MARK = {"fail": "✗", "warn": "!", "pass": "✓", "skip": "-"}


def cell(value: Any, limit: int = MAX_CELL) -> str:
    """A table cell: one line, pipes escaped, bounded."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit] + "…"
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return text or " "


def code(text: str) -> str:
    """Inline code that survives backticks inside."""
    text = " ".join(str(text).split())
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(lines: list[str], lang: str = "text") -> list[str]:
    body = "\n".join(lines)
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`{3,}", body)), default=0) + 1)
    return [f"{ticks}{lang}", *lines, ticks]


def details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{cell(summary, 200)}</summary>", "", *body, "", "</details>", ""]


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out + [""]


# ---------------------------------------------------------------------------------------------


def _verdict(doc: dict) -> list[str]:
    v = doc["verdict"]
    word = {"fail": "problems found", "warn": "warnings", "pass": "no problems found"}[v["status"]]
    out = ["# verl-doctor report", "", f"**Verdict: {MARK[v['status']]} {word}**", ""]
    out += [f"- {cell(line, 400)}" for line in v["lines"]] or ["- nothing to report"]
    return out + [""]


def _logs(doc: dict) -> list[str]:
    out: list[str] = []
    for log in doc["logs"]:
        out += [f"## Log {code(log['name'])}", ""]
        if log.get("error"):
            out += [f"Could not be read: {cell(log['error'])}", ""]
            continue
        cause = log.get("root_cause")
        if cause:
            phase = f", phase {code(cause['phase'])}" if cause.get("phase") else ""
            out += [f"**Root cause: {cell(cause['title'])}** ({cause['category']}{phase}, rule "
                    f"{code(cause['rule'])}, confidence {cause['confidence']:.2f})", "",
                    f"{cell(cause['cause'], 1500)}", "", "**Fix:**", ""]
            out += fence([ln for ln in str(cause["fix"]).splitlines()[:30]])
            out += ["", "Evidence:", ""]
            out += fence([f"{ln['n']}: {ln['text']}" for ln in cause.get("lines") or []])
            out.append("")
            others = log.get("other_causes") or []
            if others:
                out += ["Also matched: " + ", ".join(
                    f"{code(o['rule'])}{' (consequence)' if o.get('consequence') else ''}" for o in others), ""]
        else:
            out += ["No known failure signature matched. The lines to look at first:", ""]
            out += fence([f"{ln['n']}: {ln['text']}" for ln in log.get("look_at") or []] or ["(none)"])
            out.append("")
        excerpt = log.get("excerpt") or []
        if excerpt:
            body: list[str] = []
            last = None
            for item in excerpt:
                if last is not None and item["n"] != last + 1:
                    body.append(f"... [lines {last + 1}-{item['n'] - 1} not shown]")
                mark = ">" if item["evidence"] else " "
                body.append(f"{mark}{item['n']:>8}: {item['text']}")
                last = item["n"]
            if last is not None and last < log["lines"]:
                body.append(f"... [lines {last + 1}-{log['lines']} not shown]")
            what = ("the whole log" if log.get("excerpt_complete") else
                    f"lines around the evidence (>) and the last lines, of {log['lines']:,} lines / "
                    f"{log['bytes']:,} bytes")
            out += details(f"Log excerpt: {what}", fence(body))
        if log.get("note"):
            out += [f"_{cell(log['note'])}_", ""]
    return out


def _checks(doc: dict) -> list[str]:
    c = doc["checks"]
    n = c["counts"]
    out = ["## doctor check", "",
           f"{n['fail']} failed, {n['warn']} warnings, {n['pass']} passed, {n['skip']} skipped.", ""]
    if c["problems"]:
        rows = [[f"{MARK[f['status']]} {f['status']}", f["id"], f.get("node") or "", f["title"],
                 _beyond(f["message"], f["title"]), f["fix"]] for f in c["problems"]]
        out += table(["status", "check", "node", "problem", "details", "fix"], rows)
    if c.get("problems_not_listed"):
        out += [f"_{c['problems_not_listed']} more problems not listed._", ""]
    return out


def _beyond(message: str, title: str) -> str:
    """The message without a repeat of the title it starts with."""
    if message.startswith(title):
        return message[len(title):].lstrip(" :.-") or " "
    return message


def _versions(doc: dict) -> list[str]:
    nodes = doc.get("nodes") or {}
    if not nodes:
        return []
    labels = list(nodes)
    names = [k for k in next(iter(nodes.values()))]
    diff = set(doc.get("version_differences") or [])
    rows = [[f"**{k} ≠**" if k in diff else k, *[nodes[l].get(k, "") for l in labels]] for k in names]
    out = ["## Versions" + (" per node" if len(labels) > 1 else ""), ""]
    if diff:
        out += [f"Differences between nodes are marked ≠: {', '.join(sorted(diff))}.", ""]
    return out + table(["", *labels], rows)


def _launch(doc: dict) -> list[str]:
    launch = doc.get("launch")
    if not launch:
        return []
    import shlex

    out = ["## Launch", "", *fence([" ".join(shlex.quote(a) for a in launch["argv"])], "bash")]
    if launch.get("script") and launch.get("runs"):
        where = f" in {code(launch['cwd'])}" if launch.get("cwd") else ""
        out += ["", f"The script runs {code(launch['runs'])}{where}."]
    if launch.get("exports"):
        out += ["", "Exported by the script:", ""]
        out += table(["variable", "value"], [[k, v] for k, v in launch["exports"].items()])
    if launch.get("overrides"):
        out += details(f"{len(launch['overrides'])} overrides", fence(launch["overrides"]))
    return out + [""]


def _config(doc: dict) -> list[str]:
    config = doc.get("config")
    if not config:
        return []
    out = ["## Effective config", "", f"Composed by {cell(config['source'])}; only keys that differ from "
           "verl's defaults.", ""]
    if config.get("rejected"):
        out += ["Overrides verl would reject:", ""]
        out += table(["override", "error"], [[r["override"], r["error"]] for r in config["rejected"]])
    rows = [[k, v["value"], v["default"]] for k, v in config["changed"].items()]
    body = table(["key", "value", "verl default"], rows) if rows else ["(no key differs)", ""]
    return out + details(f"{len(rows)} keys differ from verl's defaults", body)


def _plan(doc: dict) -> list[str]:
    plan, memory = doc.get("plan"), doc.get("memory")
    out: list[str] = []
    if plan:
        labels = {"B": "train_batch_size (B)", "n": "rollout.n", "T": "trajectories per step (T = B*n)",
                  "M": "ppo_mini_batch_size (M)", "m": "ppo_micro_batch_size_per_gpu (m)", "W": "world size (W)",
                  "updates_per_iter": "updates per step (ceil(T/M))", "local_mini": "local mini-batch (M/W)",
                  "accum_steps": "gradient accumulation (local_mini/m)", "N": "dataset rows (N)",
                  "iters_per_epoch": "steps per epoch (ceil(N/B))", "total_updates": "total updates"}
        rows = [[label, plan.get(k)] for k, label in labels.items() if plan.get(k) is not None]
        out += ["## Batch arithmetic", "", *table(["quantity", "value"], rows)]
    if memory:
        gib = lambda b: f"{b / 2**30:.2f} GiB" if isinstance(b, (int, float)) else "?"
        fits = {True: "fits", False: "does NOT fit", None: "capacity unknown (give --device-memory)"}[memory.get("fits")]
        out += ["## Memory estimate", "",
                f"Peak phase {code(memory['peak_phase'])}: {gib(memory['total'])} per device, "
                f"capacity {gib(memory.get('capacity'))}: {fits}.", ""]
        out += table(["part", "bytes"], [[k, gib(v)] for k, v in (memory.get("parts") or {}).items()])
        for s in memory.get("suggestions") or []:
            out.append(f"- suggestion: {cell(s)}")
        out.append("")
    return out


def _provenance(doc: dict) -> list[str]:
    d = doc["doctor"]
    out = ["## About this report", "",
           f"verl-doctor {d['version']} (python {d['python']}, {cell(d['platform'])}), "
           f"{d['generated_utc']}, {d['seconds']} s.", "", "Command:", "", *fence([d["command"]], "bash"), ""]
    notes = list(doc.get("notes") or [])
    out.append("Secrets are redacted" + (", host names, addresses and user names anonymized." if d.get("anonymized") else "."))
    if notes:
        out += ["", "Notes:", ""] + [f"- {cell(n, 400)}" for n in notes]
    return out + [""]


def render(doc: dict) -> str:
    parts = [_verdict(doc), _logs(doc), _checks(doc), _versions(doc), _launch(doc), _config(doc),
             _plan(doc), _provenance(doc)]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"


# Each step shortens the excerpts further: (context lines kept, tail lines kept).
_SHRINK = ((3, 40), (2, 15), (1, 5), (0, 0))


def to_markdown(doc: dict) -> str:
    """The Markdown report, under MAX_MARKDOWN_BYTES: excerpts shortened step by step, then the
    config, then whole log sections (the verdict still names every log)."""
    budget = MAX_MARKDOWN_BYTES * 0.97  # room for the last pass's replacements

    def size(d: dict) -> int:
        return len(render(d).encode())

    for context, tail in _SHRINK[1:]:
        if size(doc) <= budget:
            break
        doc = _shrink(doc, context, tail)
    if size(doc) > budget:
        doc = dict(doc, config=None, launch=dict(doc["launch"], overrides=[]) if doc.get("launch") else None)
        doc["notes"] = list(doc.get("notes") or []) + ["config and overrides left out to stay under the size bound"]
    logs = list(doc["logs"])
    while logs and size(doc) > budget:
        over = size(doc) / budget
        del logs[-max(1, int(len(logs) * (1 - 1 / over))):]
        left = len(doc["logs"]) - len(logs)
        doc = dict(doc, logs=logs, notes=[n for n in doc["notes"] if not n.startswith("the last ")]
                   + [f"the last {left} log sections left out to stay under the size bound (see --json or --bundle)"])
    text = final_pass(doc, render(doc))
    if len(text.encode()) > MAX_MARKDOWN_BYTES:  # last resort: cut before a section heading
        cut = text.encode()[: MAX_MARKDOWN_BYTES - 200].decode("utf-8", "ignore")
        text = cut.rsplit("\n## ", 1)[0] + "\n\n_Report cut at the size bound._\n"
    return text


def _shrink(doc: dict, context: int, tail: int) -> dict:
    doc = dict(doc)
    logs = []
    for log in doc["logs"]:
        log = dict(log)
        ex = log.get("excerpt") or []
        ev = [i["n"] for i in ex if i["evidence"]]
        last = log.get("lines", 0)
        keep = [i for i in ex if any(abs(i["n"] - e) <= context for e in ev) or i["n"] > last - tail]
        log["excerpt"], log["excerpt_complete"] = keep, False
        logs.append(log)
    doc["logs"] = logs
    doc["notes"] = [n for n in doc.get("notes") or [] if not n.startswith("log excerpts shortened")]
    doc["notes"].append(f"log excerpts shortened to {context} lines of context and the last {tail} lines "
                        "to stay under the size bound")
    return doc

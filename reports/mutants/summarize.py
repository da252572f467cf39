#!/usr/bin/env python3
"""Summarises a cargo-mutants output directory per function: outcomes, and the tests that failed
when the function was mutated (read from each mutant's log). Usage:
    python3 reports/mutants/summarize.py MUTANTS_OUT [MUTANTS_OUT ...]
Later directories (an --iterate rerun) override earlier outcomes of the same mutant."""
import collections
import json
import os
import re
import sys

outcome = {}
killers = collections.defaultdict(collections.Counter)
for out in sys.argv[1:]:
    data = json.load(open(os.path.join(out, "outcomes.json")))
    for o in data["outcomes"]:
        scenario = o["scenario"]
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue
        m = scenario["Mutant"]
        fn = m.get("function", {}).get("function_name", "?")
        key = m["name"]
        outcome[key] = (m["file"], fn, o["summary"])
        if o["summary"] == "CaughtMutant":
            log = open(os.path.join(out, o["log_path"]), errors="replace").read()
            for test in set(re.findall(r"^test (\S+) \.\.\. FAILED", log, re.M)):
                killers[(m["file"], fn)][test.split("::")[-1]] += 1

per_fn = collections.defaultdict(collections.Counter)
for file, fn, summary in outcome.values():
    per_fn[(file, fn)][summary] += 1

print("| file | function | caught | timeout | missed | unviable | tests that failed most often |")
print("|---|---|---:|---:|---:|---:|---|")
for (file, fn), c in sorted(per_fn.items()):
    top = ", ".join(f"`{t}`" for t, _ in killers[(file, fn)].most_common(2))
    print(f"| {file.replace('sweeper/src/', '')} | `{fn}` | {c['CaughtMutant']} | {c['Timeout']} | "
          f"{c['MissedMutant']} | {c['Unviable']} | {top} |")
total = collections.Counter(s for _, _, s in outcome.values())
print()
print(f"{len(outcome)} mutants: {total['CaughtMutant']} caught, {total['Timeout']} timed out "
      f"(a hung test: caught), {total['MissedMutant']} missed, {total['Unviable']} unviable "
      f"(do not compile).")
missed = sorted(k for k, (_, _, s) in outcome.items() if s == "MissedMutant")
if missed:
    print("\nMissed:\n")
    for k in missed:
        print(f"- `{k}`")

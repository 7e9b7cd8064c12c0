"""Combine the fault tests of pytest and bats into one tally (called by run-tests.sh).

Usage: fault_tally.py PYTEST_JSON BATS_TAP

Prints each fault of the reliability list with its result, then `faults: N tried, M
passed`, and last the plain total line `all: P passed, F failed` over every test run.
"""

import json
import re
import sys

FAULTS = 112


def main(pytest_json: str, bats_tap: str) -> int:
    try:
        data = json.load(open(pytest_json))
    except (OSError, ValueError):
        data = {"faults": {}, "counts": {"passed": 0, "failed": 0}}
    results = {int(k): v for k, v in data["faults"].items()}
    passed, failed = data["counts"]["passed"], data["counts"]["failed"]
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    for line in open(bats_tap, encoding="utf-8", errors="replace"):
        ok = line.startswith("ok ")
        if not ok and not line.startswith("not ok "):
            continue
        skipped = "# skip" in line
        status = "skipped" if skipped else "passed" if ok else "failed"
        if status == "passed":
            passed += 1
        elif status == "failed":
            failed += 1
        found = re.match(r"(?:not )?ok \d+ fault (\d+):", line)
        if found:
            n = int(found.group(1))
            results[n] = max(results.get(n, "passed"), status, key=rank.__getitem__)
    print("fault suite (the reliability list):")
    later = sorted(n for n in results if n > FAULTS)  # the catalogue's later sections (200 on) as tests tag them
    for n in [*range(1, FAULTS + 1), *later]:
        print(f"  fault {n:2d}: {results.get(n, 'NOT TESTED')}")
    tried = len([n for n in results if n >= 1])
    ok = sum(1 for n, s in results.items() if s == "passed" and n >= 1)
    print(f"faults: {tried} tried, {ok} passed")
    print(f"all: {passed} passed, {failed} failed")
    return 0 if ok == tried and all(n in results for n in range(1, FAULTS + 1)) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

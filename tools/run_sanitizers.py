"""Run sanitize_tiers.py under every compute-sanitizer tool and print one summary (needs a CUDA GPU).

    python tools/run_sanitizers.py [--tools memcheck,racecheck,synccheck,initcheck] [--log-dir DIR] [--cases REGEX]

The four tools run at once (one process each); a tool is clean when compute-sanitizer reports 0 errors and every
case of sanitize_tiers.py matched its reference. Exits non-zero unless all are clean.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

TOOLS = ["memcheck", "racecheck", "synccheck", "initcheck"]
HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--log-dir", type=Path, default=None, help="keep each tool's full output here")
    parser.add_argument("--cases", default="", help="a regular expression: run only the cases whose name matches")
    args = parser.parse_args()
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")  # every allocation visible to memcheck / initcheck
    env["DSMHIST_SANITIZE_CASES"] = args.cases
    started = time.time()
    runs = {}
    for tool in args.tools.split(","):
        # Only the project's kernels are instrumented (torch's own would make racecheck take many minutes).
        command = ["compute-sanitizer", "--tool", tool, "--kernel-name", "kns=dsmhist", "--error-exitcode", "3",
                   sys.executable, "sanitize_tiers.py"]
        runs[tool] = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
    clean = 0
    print(f"{'tool':<10} {'rc':>3} {'sanitizer errors':>17} {'cases':>14}  verdict")
    for tool, process in runs.items():
        output, _ = process.communicate()
        if args.log_dir is not None:
            args.log_dir.mkdir(parents=True, exist_ok=True)
            (args.log_dir / f"sanitizer_{tool}.log").write_text(output)
        # racecheck reports "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others "ERROR SUMMARY".
        errors = re.findall(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", output)
        errors = [a or b for a, b in errors]
        cases = re.search(r"sanitize_tiers: (\d+) passed, (\d+) failed", output)
        ok = process.returncode == 0 and errors and all(e == "0" for e in errors) and cases and cases[2] == "0"
        clean += bool(ok)
        print(f"{tool:<10} {process.returncode:>3} {','.join(errors) or 'none':>17} "
              f"{(cases[1] + ' ok, ' + cases[2] + ' bad') if cases else 'no summary':>14}  {'clean' if ok else 'FAIL'}")
        if not ok:
            print("\n".join(line for line in output.splitlines() if re.search(r"FAIL|rror|azard", line))[-4000:])
    print(f"sanitizers: {clean}/{len(runs)} clean in {time.time() - started:.0f}s")
    return 0 if clean == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())

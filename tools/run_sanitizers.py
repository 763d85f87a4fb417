"""Run sanitize_tiers.py under every compute-sanitizer tool and print one summary (needs a CUDA GPU).

    python tools/run_sanitizers.py [--tools memcheck,racecheck,synccheck,initcheck] [--log-dir DIR] [--cases REGEX]
                                   [--time-limit SECONDS]

The tools run at once (one process each); a tool is clean when compute-sanitizer reports 0 errors and every case of
sanitize_tiers.py matched its reference. Each tool's output goes to its log as it comes, so a run stopped by
--time-limit still shows the cases it finished (and is reported as unfinished, never as clean). Exits non-zero unless
all are clean.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Tuple

TOOLS = ["memcheck", "racecheck", "synccheck", "initcheck"]
HERE = Path(__file__).resolve().parent


def verdict(tool: str, returncode: Optional[int], output: str) -> Tuple[bool, str]:
    """(clean, one summary line) of one tool's run; returncode None: stopped at the time limit."""
    # racecheck reports "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", the others "ERROR SUMMARY".
    errors = re.findall(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", output)
    errors = [a or b for a, b in errors]
    cases = re.search(r"sanitize_tiers: (\d+) passed, (\d+) failed", output)
    done = len(re.findall(r"^(?:ok  |FAIL) ", output, re.MULTILINE))
    ok = returncode == 0 and errors and all(e == "0" for e in errors) and cases and cases[2] == "0"
    if cases:
        progress = f"{cases[1]} ok, {cases[2]} bad"
    else:
        progress = f"unfinished, {done} done" if returncode is None else "no summary"
    rc = "-" if returncode is None else str(returncode)
    return bool(ok), (
        f"{tool:<10} {rc:>3} {','.join(errors) or 'none':>17} {progress:>20}  {'clean' if ok else 'FAIL'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--log-dir", type=Path, default=None, help="keep each tool's full output here")
    parser.add_argument("--cases", default="", help="a regular expression: run only the cases whose name matches")
    parser.add_argument("--time-limit", type=float, default=None, help="stop every tool after this many seconds")
    args = parser.parse_args()
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")  # every allocation visible to memcheck / initcheck
    env["DSMHIST_SANITIZE_CASES"] = args.cases
    env["PYTHONUNBUFFERED"] = "1"  # a case's line reaches the log when it ends
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="sanitizers"))
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    runs = {}
    for tool in args.tools.split(","):
        # Only the project's kernels are instrumented (torch's own would make racecheck take many minutes).
        command = [
            "compute-sanitizer",
            "--tool",
            tool,
            "--kernel-name",
            "kns=dsmhist",
            "--error-exitcode",
            "3",
            sys.executable,
            "sanitize_tiers.py",
        ]
        log = open(log_dir / f"sanitizer_{tool}.log", "w")
        # A session of its own: at the time limit the sanitizer and the python it runs are stopped together.
        runs[tool] = (
            subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
            log,
        )
    deadline = None if args.time_limit is None else started + args.time_limit
    clean = 0
    print(f"{'tool':<10} {'rc':>3} {'sanitizer errors':>17} {'cases':>20}  verdict")
    for tool, (process, log) in runs.items():
        try:
            returncode = process.wait(None if deadline is None else max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
        log.close()
        output = (log_dir / f"sanitizer_{tool}.log").read_text(errors="replace")
        ok, summary = verdict(tool, returncode, output)
        clean += ok
        print(summary)
        if not ok:
            print("\n".join(line for line in output.splitlines() if re.search(r"FAIL|rror|azard", line))[-4000:])
    print(f"sanitizers: {clean}/{len(runs)} clean in {time.time() - started:.0f}s")
    return 0 if clean == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())

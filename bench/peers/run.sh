#!/usr/bin/env bash
# Side-by-side peer benchmark: NumPy, Numba, JAX (CPU), Dr.Jit (LLVM) and, on the scans, PyTensor
# on kiln's workloads, then kiln's own bench_report, then one merged table (kiln ms, each peer's ms,
# peer/kiln).
#
#   bench/peers/run.sh             # full run
#   bench/peers/run.sh --quick     # fewer repetitions (peers best of 1, bench_report --quick)
#   bench/peers/run.sh --no-kiln   # peers only (no cargo)
#
# Environment: KILN_PEERS_VENV (default ~/.cache/kiln-peers-venv), KILN_PEERS_PYTHON (the Python
# that creates it, default python3.11), KILN_PEERS_OUT (where the outputs go, default a temp dir),
# KILN_PEERS_ONLY (comma-separated substrings: only the workloads, and bench_report rows, whose
# names contain one, e.g. KILN_PEERS_ONLY=laplacian,blur; default every workload).
# Not part of CI: it needs PyPI the first time and takes a few minutes.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

quick=0
kiln=1
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        --no-kiln) kiln=0 ;;
        -h | --help)
            sed -n '2,14p' "$here/run.sh" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "run.sh: unknown argument '$arg' (try --help)" >&2
            exit 2
            ;;
    esac
done

venv="${KILN_PEERS_VENV:-$HOME/.cache/kiln-peers-venv}"
base_python="${KILN_PEERS_PYTHON:-python3.11}"
only="${KILN_PEERS_ONLY:-}"
out="${KILN_PEERS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/kiln-peers.XXXXXX")}"
mkdir -p "$out"

# --- the virtual environment ---------------------------------------------------------------------
if [[ ! -x "$venv/bin/python" ]]; then
    if ! command -v "$base_python" > /dev/null; then
        echo "run.sh: $base_python not found (set KILN_PEERS_PYTHON to a Python 3.11)" >&2
        exit 1
    fi
    echo "run.sh: creating $venv"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip || true
fi
py="$venv/bin/python"

# one package at a time, so that one that cannot be installed does not stop the others (peers.py
# skips a peer it cannot import, and says why). pytensor comes last and may not change the numpy,
# numba and llvmlite already installed (pytensor 3.x pins numba <= 0.65.1: pip then picks the newest
# pytensor that accepts the installed numba), so that the other peers' versions stay as they were.
constraints="$(mktemp "${TMPDIR:-/tmp}/kiln-peers-constraints.XXXXXX")"
trap 'rm -f "$constraints"' EXIT
for spec in numpy numba "jax[cpu]" drjit pytensor; do
    module="${spec%%[*}"
    if ! "$py" -c "import $module" > /dev/null 2>&1; then
        echo "run.sh: installing $spec"
        pin=()
        if [[ "$spec" == pytensor ]]; then
            "$py" -m pip freeze 2> /dev/null |
                grep -iE '^(numpy|numba|llvmlite)==' > "$constraints" || true
            pin=(-c "$constraints")
        fi
        "$py" -m pip install --quiet ${pin[@]+"${pin[@]}"} "$spec" ||
            echo "run.sh: pip could not install $spec (peers.py will skip it)" >&2
    fi
done

# --- the peers -----------------------------------------------------------------------------------
peer_args=(--json "$out/peers.json")
report_args=()
merge_args=()
if [[ -n "$only" ]]; then
    # peers.py matches workload names, bench_report its row names ("stencil laplacian", ...)
    peer_args+=(--workloads "$only")
    report_args+=(--only "$only")
    merge_args+=(--workloads "$only")
fi
if ((quick)); then
    peer_args+=(--reps 1)
    report_args+=(--quick)
fi
echo
echo "=== peers (bench/peers/peers.py) ==="
"$py" "$here/peers.py" "${peer_args[@]}" | tee "$out/peers.txt"

# --- kiln ----------------------------------------------------------------------------------------
: > "$out/kiln.txt"
if ((kiln)); then
    echo
    echo "=== kiln (cargo run --release --example bench_report) ==="
    # the peers' figures, for bench_report's rows that compare with them (ad gradient)
    if ! KILN_PEERS_JSON="$out/peers.json" \
        cargo run --release --example bench_report -- ${report_args[@]+"${report_args[@]}"} 2>&1 |
        tee "$out/kiln.txt"; then
        echo "run.sh: bench_report failed; the kiln column will be empty" >&2
    fi
fi

# --- merged --------------------------------------------------------------------------------------
echo
echo "=== merged ==="
"$py" "$here/peers.py" --merge "$out/kiln.txt" --json "$out/peers.json" \
    ${merge_args[@]+"${merge_args[@]}"}
echo
echo "outputs in $out (peers.json, peers.txt, kiln.txt)"

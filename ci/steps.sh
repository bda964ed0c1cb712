# Helpers for ci/setup.sh, ci/test.sh and ci/demo.sh (sourced from the repository root): the Python they use,
# timed steps, the dpkg lock wait.

# The Python of every script: $PYTHON when set (an environment you manage yourself), else the project's virtual
# environment .venv at the repository root (VENV_DIR moves it), which ci/setup.sh creates from $BASE_PYTHON
# (default python3). A venv works where the system Python refuses `pip install` (PEP 668, Debian 12, Ubuntu 24.04).
VENV_DIR=${VENV_DIR:-$PWD/.venv}
export PYTHON=${PYTHON:-$VENV_DIR/bin/python}

# Setup steps are recorded in ci/test.sh's summary too: each line is appended to $STEP_LOG when it is set.
STEP_SUMMARY=()

# step <prefix> <name> <command...>: a header line, the command's own output, then its status and time.
step() {
  local prefix=$1 name=$2 rc=0 t0=$EPOCHREALTIME dt
  shift 2
  echo "[$prefix] $name"
  # A line every $STEP_TICK_S s (default 25) while the step runs, so that no step is silent for long (its own lines
  # come in between).
  ( while sleep "${STEP_TICK_S:-25}"; do
      echo "  ... $name: running for $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
    done ) &
  local ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 0 ]; then
    echo "[$prefix] $name: ok, $dt s"
    STEP_SUMMARY+=("$(printf '  ok      %7s s  [%s] %s' "$dt" "$prefix" "$name")")
  else
    echo "[$prefix] $name: FAILED (exit $rc), $dt s"
    STEP_SUMMARY+=("$(printf '  FAILED  %7s s  [%s] %s' "$dt" "$prefix" "$name")")
  fi
  if [ -n "${STEP_LOG:-}" ]; then printf '%s\n' "${STEP_SUMMARY[-1]}" >> "$STEP_LOG"; fi
  return "$rc"
}

print_summary() {
  local line
  for line in "${STEP_SUMMARY[@]}"; do echo "$line"; done
}

# Exit 0 when none of the given lock files is held (POSIX record locks, as dpkg and apt take them).
# A lock file that cannot be opened (absent, or not root) counts as free: apt's own timeout applies.
dpkg_locks_free() {
  python3 - "$@" <<'EOF'
import fcntl, os, sys
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        continue
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit(1)
    finally:
        os.close(fd)  # releases the probe's own lock
EOF
}

# Wait (with a message) while another apt/dpkg process holds the package database lock.
wait_for_dpkg_lock() {
  local locks waited=0 limit=${DPKG_LOCK_WAIT:-600} holders
  read -r -a locks <<< "${DPKG_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock}"
  while ! dpkg_locks_free "${locks[@]}"; do
    if [ $((waited % 30)) -eq 0 ]; then
      holders=$(pgrep -a 'apt|apt-get|dpkg|unattended-upgr' 2>/dev/null | head -3 | paste -sd ';' - || true)
      echo "  another apt/dpkg process holds the package lock (${holders:-holder unknown}); waiting, ${waited} s of at most ${limit} s"
    fi
    if [ "$waited" -ge "$limit" ]; then
      echo "  the package lock is still held after ${limit} s: giving up (DPKG_LOCK_WAIT sets the limit)"
      return 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
  if [ "$waited" -gt 0 ]; then echo "  package lock released after ${waited} s"; fi
  return 0
}

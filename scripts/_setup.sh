# Shared set-up of scripts/test and scripts/test-slow (sourced, not run).
# The test virtualenv is .venv-dev, not the quick start's .venv: an editable reinstall there would
# pull the installed package out from under a `bubu ui` started from it.

VENV=.venv-dev
PY=$VENV/bin/python

# setup_venv EXTRAS: create $VENV if missing and install Bubu editable with EXTRAS (e.g. dev,bench).
setup_venv() {
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
  fi
  "$PY" -m pip install -q -e ".[$1]"
}

# apt_install PROGRAM PACKAGE WHY: install PACKAGE from the system's packages when PROGRAM is
# missing (as root with apt-get), else say what to install and fail.
apt_install() {
  if command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ]; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  else
    echo "$0: $3 need $2 (Debian: apt-get install $2)" >&2
    exit 1
  fi
}

# system_tools: what the main suite runs for real besides Python packages.
system_tools() {
  apt_install chromium chromium "the web UI tests"
  apt_install bwrap bubblewrap "the sandbox tests"
  apt_install tmux tmux "the chat's terminal tests"
}

# run_pytest SELECTION [PYTEST ARGS]: run pytest on the tests matching the marker expression
# SELECTION, and'ed with any `-m EXPR` among the arguments. A quick selection (`-m "not slow"`)
# runs on every core (pytest-xdist); otherwise one test at a time, since the crash matrices,
# fleets and outage tests time leases and back-offs that a fully loaded machine would stretch.
# `-n N` (or `-n 0`) chooses for yourself.
run_pytest() {
  local selection=$1 user="" args=() workers=()
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      -m) user=$2; shift 2; continue ;;
      -m*) user=${1#-m} ;;
      *) args+=("$1") ;;
    esac
    shift
  done
  case " $user " in
    *"not slow"*) workers=(-n auto --dist worksteal) ;;
  esac
  for arg in "${args[@]}"; do
    case "$arg" in -n | -n[0-9]* | --numprocesses | --numprocesses=*) workers=() ;; esac
  done
  if [ -n "$user" ]; then
    selection="($selection) and ($user)"
  fi
  exec "$PY" -m pytest "${workers[@]}" -m "$selection" "${args[@]}"
}

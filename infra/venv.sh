# Sourced by infra/*.sh: build (once) a Python venv holding pinned PyPI tools.
#
#   ds_venv NAME CONSTRAINTS_FILE REQUIREMENT...   -> prints the venv's bin directory
#
# The venv lives in ${XDG_CACHE_HOME:-$HOME/.cache}/ds-infra/NAME-<py>-<hash of the
# constraints file and requirements>/; a new pin makes a new venv. A `.installed`
# stamp is written last, so a half-built venv is never used; concurrent first runs
# wait on a flock. Progress goes to stderr.

ds_venv() {
  local name="$1" constraints="$2"; shift 2
  local py="${DS_INFRA_PYTHON:-python3}"
  command -v "$py" >/dev/null 2>&1 || { echo "$name: $py not found (set DS_INFRA_PYTHON)" >&2; return 2; }
  local cache="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ds-infra"
  local pyver hash
  pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  hash="$( { cat "$constraints"; printf '%s\n' "$@"; } | sha256sum | cut -c1-12)"
  local venv="$cache/$name-py$pyver-$hash"
  if [ ! -f "$venv/.installed" ]; then
    mkdir -p "$cache"
    (
      if command -v flock >/dev/null 2>&1; then flock 9; fi
      if [ ! -f "$venv/.installed" ]; then
        echo "$name: installing $* into $venv (first run only; needs PyPI via pip)" >&2
        rm -rf "$venv"
        "$py" -m venv "$venv" >"$cache/$name-install.log" 2>&1 \
          || { tail -n 20 "$cache/$name-install.log" >&2; echo "$name: cannot create a venv (apt-get install python3-venv?)" >&2; exit 2; }
        if ! "$venv/bin/python" -m pip install --disable-pip-version-check -c "$constraints" "$@" \
              >>"$cache/$name-install.log" 2>&1; then
          tail -n 30 "$cache/$name-install.log" >&2
          rm -rf "$venv"
          echo "$name: pip install failed (log: $cache/$name-install.log)" >&2
          exit 2
        fi
        touch "$venv/.installed"
      fi
    ) 9>"$cache/.$name.lock" || return 2
  fi
  echo "$venv/bin"
}

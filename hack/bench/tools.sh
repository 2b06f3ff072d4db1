# Sourced by the benchmarks: `need_tools PACKAGE[:COMMAND]...` installs (apt-get) the
# Debian packages whose command is missing (COMMAND when it is not the package's name), or
# exits 2 saying how to install them.
need_tools() {
  local tool missing=()
  for tool in "$@"; do
    command -v "${tool#*:}" >/dev/null 2>&1 || [ -x "/usr/sbin/${tool#*:}" ] || missing+=("${tool%%:*}")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing ${missing[*]} (apt-get)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
    { echo "cannot install ${missing[*]}: apt-get install -y ${missing[*]}" >&2; exit 2; }
}

# ticks.sh: sourced by the scripts that count CPU per task (cpu.sh,
# console.sh). Clock ticks (hz a second): every CPU's busy time; a
# process's; a thread's, by its name.
machine() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
proc() { awk '{print $14+$15}' "/proc/$1/stat"; }
thread() {
  local t
  for t in /proc/"$1"/task/*; do
    if [[ $(cat "$t/comm") == "$2" ]]; then awk '{print $14+$15}' "$t/stat"; fi
  done
}
hz=$(getconf CLK_TCK)

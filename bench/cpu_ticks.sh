# cpu_ticks.sh - CPU time readings shared by the benchmark scripts (sourced by
# compare.sh, w1_cpu.sh and floor.sh). Every function prints clock ticks
# (getconf CLK_TCK per second).
#   machine_ticks          busy time of the whole machine (/proc/stat: user, nice, system,
#                          irq, softirq, steal)
#   steal_ticks            time the hypervisor gave this VM's CPUs to other guests
#   proc_ticks PID...      each process's own time plus that of the children it reaped
#   pg_ticks STACK_DIR     the PostgreSQL of that scripts/stack.sh stack: its postmaster
#                          and backends, including the backends that already exited
#   kafka_ticks STACK_DIR  the Kafka broker of that stack

machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
proc_ticks() {
  local t=0 p v
  for p in "$@"; do
    v=$(sed -E 's/^.*\) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13 + $14 + $15}')
    t=$((t + ${v:-0}))
  done
  echo $t
}
pg_ticks() {
  local pm
  pm=$(head -n1 "$1/postgres/postmaster.pid" 2>/dev/null)
  if [ -n "$pm" ]; then proc_ticks "$pm" $(pgrep -P "$pm"); else echo 0; fi
}
kafka_ticks() { proc_ticks $(cat "$1/kafka.pid" 2>/dev/null); }

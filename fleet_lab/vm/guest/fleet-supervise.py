"""fleet-lab guest supervisor (runs as PID 1 after /init): starts sshd and the guest services,
restarts them when they die, and reaps every process that ends up orphaned.

Services start through os.posix_spawn: the subprocess module took 1.4 s of a TCG guest's CPU to
import at every boot. The supervisor's own files are not inherited (Python opens them
close-on-exec); each service gets /dev/null as stdin and its log as stdout and stderr."""
import os
import sys
import time

PY = sys.executable or "/usr/bin/python3"
SERVICES = {
    "sshd": ["/usr/sbin/sshd", "-D", "-e"],
    "health": [PY, "-I", "-S", "/usr/local/sbin/fleet-health.py"],
    "udprecv": [PY, "-I", "-S", "/usr/local/sbin/fleet-udprecv.py"],
}
# node_exporter on the port QEMU forwards (the lab's Prometheus scrapes it), with the
# collectors a counter window reads
EXPORTER = "/usr/bin/prometheus-node-exporter"
if os.path.exists(EXPORTER):
    SERVICES["node_exporter"] = [
        EXPORTER, "--web.listen-address=:9100", "--collector.disable-defaults",
        "--collector.netdev", "--collector.netstat", "--collector.softnet", "--collector.stat",
        "--collector.netdev.device-exclude=^lo$"]


def console(message):
    try:
        with open("/dev/console", "w") as out:
            with open("/proc/uptime") as uptime:
                now = uptime.read().split()[0]
            out.write(f"fleet-lab: [{now}] {message}\n")
    except OSError:
        pass


def start(name):
    os.makedirs("/run/sshd", exist_ok=True)
    argv = SERVICES[name]
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, f"/var/log/fleet/{name}.log",
                os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions)


def main():
    running = {}
    adopted = os.environ.pop("FLEET_SSHD_PID", "")
    if adopted.isdigit():
        running[int(adopted)] = "sshd"  # started by /init; our child since init exec'd us
    for name in SERVICES:
        if name not in running.values():
            running[start(name)] = name
    console("services running: " + ", ".join(SERVICES))
    last_start = {}
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(1)
            continue
        except InterruptedError:
            continue
        name = running.pop(pid, None)
        if name is None:
            continue  # an orphan: reaped, nothing else to do
        console(f"{name} exited (status {status}), restarting")
        since = time.monotonic() - last_start.get(name, 0.0)
        if since < 2:
            time.sleep(2 - since)
        last_start[name] = time.monotonic()
        running[start(name)] = name


if __name__ == "__main__":
    main()

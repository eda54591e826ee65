#!/usr/bin/env python3
"""The rolling upgrade of scripts/rolling-upgrade.sh, once both builds exist.

    python3 scripts/rolling_upgrade.py --old OLD/shoal --new NEW/shoal --old-commit 71428bd

Five agents of the old build on 127.0.0.1 (n1-n3 run processes, n4-n5 containers, told apart by
the label `runtime`), three workloads (web: a stateless HTTP service, 3 replicas, polled every
50 ms; pg: an exclusive replica with a data volume; box: 2 containers), a deleted workload (its
tombstone must stay) and a spec changed once (its history must stay). Then:

1. n5 goes to the new build and back to the old one (a host rolled back before the mesh version
   moves just works);
2. every agent, n1 to n5, is replaced: SIGTERM, the new binary moved over the old path (the old
   file stays open for the processes that run it), the same data dir; after each, every replica
   must be running again before the next step;
3. a spec setting `user` (a field of wire 8) is refused while an old agent remains, naming it, and
   accepted once the mesh version moved; its replica runs as that user.

Agents of the old build are stopped with SIGKILL (a build before 8 fences its exclusive
replicas on SIGTERM; a kill is a crash the guard's lease covers, docs/operations.md), agents of
this build with SIGTERM (a planned restart).

Ground truth comes from the host, not from Shoal: the web service's answers, the processes
(`pgrep`) and the containers (`docker ps`) found before and after. Prints one JSON object.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request

AGENTS = 5
DOCKER_AGENTS = {4, 5}
BASE_PORT = 7100
WEB_MARK = "/tmp/shoal-rolling-web"
PG_MARK = "86401"
USER_MARK = "86403"
IMAGE = "shoal-busybox:rolling"


def log(*args):
    print("==", *args, file=sys.stderr, flush=True)


def now_ms():
    return int(time.monotonic() * 1000)


class Mesh:
    def __init__(self, work, old, new):
        self.work, self.old, self.new = work, old, new
        self.procs = {}
        self.running = {}  # agent -> the binary it runs
        self.pki = os.path.join(work, "pki")

    def gossip(self, i):
        return f"127.0.0.1:{BASE_PORT + 10 * i}"

    def api(self, i):
        return f"127.0.0.1:{BASE_PORT + 10 * i + 1}"

    def binary_path(self, i):
        return os.path.join(self.work, f"bin-n{i}", "shoal")

    def install(self, i, binary):
        """Puts `binary` at agent i's path as a new file (rename): what a package upgrade does.
        Processes still running the old file keep it."""
        path = self.binary_path(i)
        self.running[i] = binary
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".new"
        shutil.copy2(binary, tmp)
        os.replace(tmp, path)

    def start(self, i):
        seed = self.gossip(2 if i == 1 else 1)
        runtime = "docker" if i in DOCKER_AGENTS else "process"
        cmd = [
            self.binary_path(i), "agent", "--name", f"n{i}",
            "--gossip", self.gossip(i), "--api", self.api(i),
            "--data-dir", os.path.join(self.work, f"d{i}"), "--pki", self.pki, "--self-issue",
            "--seed", seed, "--label", f"runtime={runtime}", "--runtime", runtime,
            "--port-range", f"{21000 + 1000 * i}-{21999 + 1000 * i}",
        ]
        out = open(os.path.join(self.work, f"n{i}.log"), "ab")
        self.procs[i] = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL)

    def stop(self, i, sig=signal.SIGTERM):
        """`sig`, then the wait for the exit; returns the ms it took."""
        proc = self.procs.pop(i)
        t0 = now_ms()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return now_ms() - t0

    def cli(self, *args, agent=1, check=True, timeout=30):
        env = dict(os.environ, SHOAL_AGENT=self.api(agent), SHOAL_PKI=self.pki, SHOAL_SELF_ISSUE="true")
        out = subprocess.run([self.new, *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise RuntimeError(f"shoal {' '.join(args)} (agent n{agent}): {out.stderr.strip()}")
        return out

    def json(self, *args, agent=1):
        return json.loads(self.cli(*args, "-o", "json", agent=agent).stdout)

    def live_agent(self, avoid=None):
        return next(i for i in range(1, AGENTS + 1) if i in self.procs and i != avoid)


def spec_files(work):
    specs = {
        "web": f'''name = "web"
replicas = 2
[process]
command = ["sh", "-c", "exec python3 -m http.server $SHOAL_PORT_HTTP --bind 127.0.0.1 --directory {WEB_MARK}"]
ports = [{{ name = "http" }}]
[resources]
cpu = "100m"
memory = "64Mi"
[placement]
constraints = ["runtime == process"]
[health]
http = {{ port = "http", path = "/" }}
interval = "1s"
''',
        "pg": f'''name = "pg"
replicas = 1
[process]
command = ["sh", "-c", "echo started >> $SHOAL_VOLUME_DATA/starts; exec sleep {PG_MARK}"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
exclusive = true
constraints = ["runtime == process"]
[[volumes]]
name = "data"
''',
        "box": f'''name = "box"
replicas = 2
[container]
image = "{IMAGE}"
pull = "never"
command = ["sleep", "86402"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
constraints = ["runtime == docker"]
''',
        "gone": '''name = "gone"
replicas = 1
[process]
command = ["sleep", "86404"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
constraints = ["runtime == process"]
''',
        "asuser": f'''name = "asuser"
replicas = 1
user = "nobody"
[process]
command = ["sleep", "{USER_MARK}"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
constraints = ["runtime == process"]
''',
    }
    paths = {}
    for name, text in specs.items():
        paths[name] = os.path.join(work, f"{name}.toml")
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


def import_image():
    busybox = shutil.which("busybox") or "/bin/busybox"
    with tempfile.TemporaryDirectory() as root:
        tar_path = os.path.join(root, "rootfs.tar")
        with tarfile.open(tar_path, "w") as tar:
            tar.add(busybox, arcname="bin/busybox")
            for applet in ["sh", "sleep", "ls", "id", "cat"]:
                info = tarfile.TarInfo(f"bin/{applet}")
                info.type = tarfile.SYMTYPE
                info.linkname = "busybox"
                tar.addfile(info)
        with open(tar_path, "rb") as f:
            subprocess.run(["docker", "import", "--change", 'CMD ["/bin/sh"]', "-", IMAGE],
                           stdin=f, check=True, capture_output=True)


def pids(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def containers():
    out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"ancestor={IMAGE}"],
                         capture_output=True, text=True)
    return set(out.stdout.split())


class Watch:
    """Polls the web service every 50 ms (one request, round robin over its serving endpoints)
    and counts the exclusive replica's processes every 100 ms."""

    def __init__(self, mesh):
        self.mesh = mesh
        self.stop = threading.Event()
        self.endpoints = []
        self.sent = self.failed = 0
        self.failures = []
        self.pg_max = 0
        self.pg_pids = set()
        self.lock = threading.Lock()

    def refresh(self):
        while not self.stop.is_set():
            try:
                agent = self.mesh.live_agent()
                view = self.mesh.json("endpoints", "web", agent=agent)
                eps = [f"127.0.0.1:{e['ports']['http']}" for e in view["endpoints"]
                       if e.get("serving") and "http" in e.get("ports", {})]
                if eps:
                    with self.lock:
                        self.endpoints = eps
            except Exception:
                pass
            self.stop.wait(1.0)

    def poll_web(self):
        turn = 0
        while not self.stop.is_set():
            with self.lock:
                eps = list(self.endpoints)
            if eps:
                ep = eps[turn % len(eps)]
                turn += 1
                self.sent += 1
                try:
                    urllib.request.urlopen(f"http://{ep}/", timeout=1).read()
                except Exception as e:
                    self.failed += 1
                    if len(self.failures) < 20:
                        self.failures.append(f"{time.strftime('%H:%M:%S')} {ep}: {e}")
            self.stop.wait(0.05)

    def poll_pg(self):
        while not self.stop.is_set():
            found = pids(f"sleep {PG_MARK}")
            self.pg_max = max(self.pg_max, len(found))
            self.pg_pids |= found
            self.stop.wait(0.1)

    def start(self):
        for target in (self.refresh, self.poll_web, self.poll_pg):
            threading.Thread(target=target, daemon=True).start()


def wait_for(what, check, timeout_s=90, every_s=0.25):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if check():
                return int((time.monotonic() - t0) * 1000)
        except Exception:
            pass
        time.sleep(every_s)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def all_running(mesh, names=("web", "pg", "box")):
    agent = mesh.live_agent()
    for name in names:
        view = mesh.json("status", name, agent=agent)
        running = {i["replica"] for i in view["instances"] if i["phase"] == "running" and i.get("healthy", True)}
        if len(running) < view["desired"]:
            return False
    return True


def member(mesh, i, observer):
    for n in mesh.json("nodes", agent=observer):
        if n["name"] == f"n{i}":
            return n
    return None


def adopted(mesh, i, before):
    """Agent i answers and reports running again every replica it ran before the restart
    (`before`: replica indexes by workload). That they are the same processes and containers is
    checked on the host (pgrep, docker ps), not here."""
    now = running_here(mesh, i)
    return all(ids <= now[name] for name, ids in before.items())


def running_here(mesh, i):
    """The instances agent i runs now, by workload."""
    out = {}
    for name in ("web", "pg", "box"):
        view = mesh.json("status", name, agent=i)
        out[name] = {x["replica"] for x in view["instances"]
                     if x.get("node") == f"n{i}" and x["phase"] == "running"}
    return out


def replace(mesh, i, binary, commit):
    observer = mesh.live_agent(avoid=i)
    before = running_here(mesh, i)
    # An agent of a build before 8 fences its exclusive replicas on SIGTERM: it is stopped as
    # docs/operations.md says for that case, with SIGKILL (a crash, which the guard's lease
    # covers); agents of this build get SIGTERM, a planned restart.
    sig = signal.SIGKILL if mesh.running[i] == mesh.old else signal.SIGTERM
    t0 = now_ms()
    exit_ms = mesh.stop(i, sig)
    mesh.install(i, binary)
    mesh.start(i)

    def rejoined():
        # The observer may be of the old build, which knows no build facts: alive is what it
        # says (it saw the leave before the process exited); the build is asked of the agent.
        n = member(mesh, i, observer)
        return n is not None and n["alive"]

    wait_for(f"n{i} alive again", rejoined, every_s=0.05)
    alive_ms = now_ms() - t0
    asked = mesh.cli("version", "-o", "json", agent=i, check=False)
    running = (json.loads(asked.stdout).get("agent") or {}).get("build", {}).get("commit", "?") \
        if asked.returncode == 0 else "?"
    if running != commit:
        raise RuntimeError(f"n{i} runs {running}, not {commit}")
    wait_for(f"n{i} adopted its instances", lambda: adopted(mesh, i, before), every_s=0.05)
    adopted_ms = now_ms() - t0
    settled_ms = wait_for("every replica running", lambda: all_running(mesh))
    return {"agent": f"n{i}", "to": commit, "signal": sig.name, "signal_to_exit_ms": exit_ms,
            "signal_to_alive_ms": alive_ms, "signal_to_adopted_ms": adopted_ms,
            "then_all_running_ms": settled_ms}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--old-commit", required=True)
    args = ap.parse_args()
    new_commit = json.loads(subprocess.run([args.new, "version", "--local", "-o", "json"],
                                           capture_output=True, text=True, check=True).stdout)["cli"]["commit"]
    work = os.environ.get("SHOAL_WORK") or tempfile.mkdtemp(prefix="shoal-rolling-")
    mesh = Mesh(work, args.old, args.new)
    result = {"old_commit": args.old_commit, "new_commit": new_commit, "agents": AGENTS,
              "work_dir": work}
    started = time.monotonic()
    watch = Watch(mesh)
    try:
        subprocess.run([args.new, "pki", "init", "--dir", mesh.pki], check=True, capture_output=True)
        subprocess.run([args.new, "pki", "issue", "--dir", mesh.pki, "--name", "shoal-cli",
                        "--role", "client"], check=True, capture_output=True)
        import_image()
        os.makedirs(WEB_MARK, exist_ok=True)
        specs = spec_files(work)
        log(f"starting {AGENTS} agents of {args.old_commit} in {work}")
        for i in range(1, AGENTS + 1):
            mesh.install(i, args.old)
            mesh.start(i)
            time.sleep(0.3)
        wait_for("5 live members", lambda: sum(n["alive"] for n in mesh.json("nodes")) == AGENTS)
        for name in ("web", "pg", "box", "gone"):
            mesh.cli("apply", "-f", specs[name])
        mesh.cli("scale", "web", "3")  # a second version of web: a history entry (2 -> 3)
        wait_for("every replica running", lambda: all_running(mesh, ("web", "pg", "box", "gone")), 120)
        mesh.cli("delete", "gone")
        wait_for("gone stopped", lambda: not pids("sleep 86404"))
        before = {
            "web_pids": pids(WEB_MARK), "pg_pids": pids(f"sleep {PG_MARK}"),
            "containers": containers(),
            "workloads": sorted(w["name"] for w in mesh.json("get")),
            "history": mesh.json("history", "web"),
        }
        result["before"] = {"workloads": before["workloads"], "web_pids": len(before["web_pids"]),
                            "pg_pids": len(before["pg_pids"]), "containers": len(before["containers"])}
        watch.start()
        time.sleep(2)

        log("n5 to the new build and back (before the mesh version moves)")
        rollback = [replace(mesh, 5, args.new, new_commit)]
        rollback.append(replace(mesh, 5, args.old, "?"))
        result["rollback"] = rollback

        steps = []
        for i in range(1, AGENTS + 1):
            if i == AGENTS:
                refused = mesh.cli("apply", "-f", specs["asuser"], agent=1, check=False)
                result["user_spec_before_last"] = {"exit": refused.returncode,
                                                   "message": refused.stderr.strip()}
            log(f"n{i} to {new_commit}")
            steps.append(replace(mesh, i, args.new, new_commit))
            log(f"  {steps[-1]}")
        result["steps"] = steps
        last_back = now_ms()
        moved_ms = wait_for("the mesh version to move",
                            lambda: mesh.json("upgrade", "status")["mesh_version"] > 7, 60, 0.1)
        result["mesh_version_moved_after_last_ms"] = now_ms() - last_back
        result["mesh_version_moved_wait_ms"] = moved_ms
        status = mesh.json("upgrade", "status")
        result["upgrade_status"] = {k: status[k] for k in ("mesh_version", "supported", "waiting_count")}

        applied = mesh.cli("apply", "-f", specs["asuser"], check=False)
        result["user_spec_after_move"] = {"exit": applied.returncode, "message": applied.stderr.strip()}
        if applied.returncode == 0:
            wait_for("asuser running", lambda: pids(f"sleep {USER_MARK}"), 60)
            pid = min(pids(f"sleep {USER_MARK}"))
            with open(f"/proc/{pid}/status") as f:
                uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
            result["user_spec_runs_as_uid"] = int(uid)

        time.sleep(2)
        watch.stop.set()
        after = {
            "web_pids": pids(WEB_MARK), "pg_pids": pids(f"sleep {PG_MARK}"),
            "containers": containers(),
            "workloads": sorted(w["name"] for w in mesh.json("get")),
            "history": mesh.json("history", "web"),
        }
        pg_status = mesh.json("status", "pg")
        result["requests"] = {"sent": watch.sent, "failed": watch.failed, "failures": watch.failures}
        result["restarted"] = {
            "web_processes": len(before["web_pids"] - after["web_pids"]),
            "exclusive": len(watch.pg_pids - before["pg_pids"]),
            "containers": len(before["containers"] - after["containers"]),
        }
        result["exclusive_max_copies"] = watch.pg_max
        result["kept"] = {
            "specs": set(before["workloads"]) <= set(after["workloads"]),
            "tombstone": "gone" not in after["workloads"],
            "history": len(after["history"]) >= len(before["history"]) >= 2,
            "data_record": any(i.get("data_on") for i in pg_status.get("instances", []))
            or pg_status.get("data_on") is not None,
        }
    except Exception as e:
        result["error"] = str(e)
    finally:
        watch.stop.set()
        for i in list(mesh.procs):
            mesh.stop(i)
        # Instances outlive their agents by design: remove what this run started.
        subprocess.run(["pkill", "-f", work], capture_output=True)
        for mark in (WEB_MARK, "sleep 8640"):
            subprocess.run(["pkill", "-f", mark], capture_output=True)
        subprocess.run(["docker", "rm", "-f", *containers()], capture_output=True)
        result["duration_s"] = round(time.monotonic() - started, 1)
        if not os.environ.get("SHOAL_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2, default=str))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())

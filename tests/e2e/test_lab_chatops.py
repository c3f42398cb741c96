"""ChatOps lab: ngircd + errbot (IRC backend) + err-stackstorm, and an IRC client as the SRE.

Everything runs as real processes on 127.0.0.1 in pytest's tmp dirs; the errbot virtualenv is
made from requirements-chatops.txt (<repo>/.cache/chatops-venv) on first use.

`test_err_stackstorm_wire_protocol` runs the real plugin against a small recording stub of the
st2 API (this file), to pin down exactly what err-stackstorm 2.3.2 sends and reads.

The last tests run the whole thing end to end: `lab up --chatops` on a sim lab (the runtime's
st2 API with its engine, the chatops_errbot notify rule, ngircd, errbot), a rollout started with
the real st2 CLI, its approval question announced in the channel and answered there by IRC
clients (an approver, and someone who is not).
"""
from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
import yaml

from fleet_lab import lab
from fleet_lab.chatops import bot, irc_split, ircd, procs, stack
from fleet_lab.chatops.irc_client import IrcClient, IrcLine

CHANNEL = ircd.DEFAULT_CHANNEL
BOT_NICK = "fleetbot"
BOT_USER, BOT_PASSWORD = "errbot", "lab-bot-secret-4711"


@pytest.fixture(scope="module")
def venv() -> Path:
    return bot.ensure_venv()


@pytest.fixture
def irc(tmp_path: Path) -> Iterator[ircd.IrcServer]:
    server = ircd.start(tmp_path / "ircd")
    try:
        yield server
    finally:
        assert ircd.stop(server.pid)
        assert not procs.alive(server.pid)


@pytest.mark.timeout(60)
def test_ircd_people_talk_in_the_channel(irc: ircd.IrcServer) -> None:
    assert irc.host == "127.0.0.1"
    with IrcClient(irc.host, irc.port, "sre") as sre, IrcClient(irc.host, irc.port, "oncall") as oc:
        assert sre.join(CHANNEL) == {"sre"}
        assert oc.join(CHANNEL) == {"sre", "oncall"}
        sre.wait_for_join(CHANNEL, "oncall", timeout=5)
        mark = oc.mark()
        sre.say(CHANNEL, "rollout r1 looks good\nproceeding")
        got = oc.wait_for_message(CHANNEL, from_nick="sre", pattern="proceeding", timeout=5,
                                  since=mark)
        assert got.prefix.startswith("sre!")
        assert oc.transcript(CHANNEL) == [("sre", "rollout r1 looks good"),
                                          ("sre", "proceeding")]
        assert sre.transcript(CHANNEL) == oc.transcript(CHANNEL)
        # the server pings idle clients; the reader thread answers, no need to test timing here
        assert "oncall" in sre.names(CHANNEL)


def _ask_until_answered(client: IrcClient, command: str, pattern: str, every: float,
                        within: float) -> object:
    """Say `command` in the channel until the bot answers with `pattern`; the answer line."""
    deadline = time.monotonic() + within
    while True:
        mark = client.say(CHANNEL, command)
        wait = min(every, max(1.0, deadline - time.monotonic()))
        try:
            return client.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern=pattern,
                                           timeout=wait, since=mark)
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise


@pytest.mark.timeout(300)
def test_errbot_joins_and_answers_the_sre(tmp_path: Path, venv: Path,
                                          irc: ircd.IrcServer) -> None:
    # err-stackstorm configured against an st2 API that is not there: the plugin fails to
    # start (connection refused at login), the bot itself must still serve the channel.
    st2 = bot.St2Settings(f"http://127.0.0.1:{procs.free_port()}", username=BOT_USER,
                          password=BOT_PASSWORD)
    state = tmp_path / "bot"
    b = bot.start(state, venv, irc.host, irc.port, CHANNEL, BOT_NICK, st2=st2)
    try:
        assert bot.running_pid(state) == b.pid
        with IrcClient(irc.host, irc.port, "sre") as sre:
            assert BOT_NICK in sre.join(CHANNEL)
            # the first answer waits for the bot's plugins to settle (err-stackstorm failing
            # its login), which can take over 30 s on a loaded machine, and a command said right
            # after the bot joined can get no answer at all, so the SRE asks again, as a person
            # would, every 20 s for up to 2 minutes
            assert _ask_until_answered(sre, "!echo canary 42", "canary 42", every=20.0,
                                       within=120.0)
            mark = sre.say(CHANNEL, "!status")
            assert sre.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern="(?i)yes|alive",
                                        timeout=30, since=mark)
            mark = sre.say(CHANNEL, "!help")
            help_lines = sre.collect(lambda ln: ln.nick == BOT_NICK, quiet=2, timeout=60,
                                     since=mark)
            text = "\n".join(ln.plain for ln in help_lines)
            assert "!echo" in text and "!status" in text, text
            assert all(ln.target == CHANNEL for ln in help_lines)  # answered in the channel
            said = [nick for nick, _ in sre.transcript(CHANNEL)]
            assert "sre" in said and BOT_NICK in said
    finally:
        assert bot.stop(b.pid, timeout=15)
    assert not procs.alive(b.pid)
    assert bot.running_pid(state) is None
    for name in (bot.LOG_NAME, bot.CONSOLE_NAME, bot.CONFIG_NAME):
        assert BOT_PASSWORD not in (state / name).read_text(encoding="utf-8", errors="replace")


# -- a recording stub of the st2 API (one port: /auth/v1, /api/v1, /stream/v1) ------------


class St2Stub:
    TOKEN = "tok-0123456789abcdef"
    ALIAS = {"name": "rollout_status", "pack": "fleet_rollout",
             "ref": "fleet_rollout.rollout_status", "enabled": True,
             "description": "Show a rollout",
             "formats": ["rollout status {{rollout_id}}"],
             "ack": {"format": "on it: {{ execution.id }}", "append_url": False}}

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        self.events: queue.Queue[Optional[str]] = queue.Queue()
        self.stopping = threading.Event()
        self.streams = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                return None

            def _record(self) -> Dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                entry = {"method": self.command, "path": self.path,
                         "headers": {k.lower(): v for k, v in self.headers.items()},
                         "body": body}
                stub.requests.append(entry)
                return entry

            def _json(self, status: int, doc: Any) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authed(self, req: Dict[str, Any]) -> bool:
                return req["headers"].get("x-auth-token") == stub.TOKEN

            def do_POST(self) -> None:
                req = self._record()
                if self.path == "/auth/v1/tokens":
                    want = "Basic " + base64.b64encode(
                        f"{BOT_USER}:{BOT_PASSWORD}".encode()).decode()
                    if req["headers"].get("authorization") != want:
                        return self._json(401, {"faultstring": "Invalid or missing credentials"})
                    return self._json(201, {"user": BOT_USER, "token": stub.TOKEN,
                                            "expiry": "2099-01-01T00:00:00.000000Z",
                                            "id": "t1", "metadata": {}})
                if not self._authed(req):
                    return self._json(401, {"faultstring": "Unauthorized"})
                command = (req["body"] or {}).get("command", "")
                matched = command.startswith("rollout status ")
                if self.path == "/api/v1/actionalias/match":
                    if not matched:
                        return self._json(400, {"faultstring": f'Command "{command}" matched no '
                                                               "patterns"})
                    return self._json(200, {"actionalias": stub.ALIAS,
                                            "display": "rollout status <rollout_id>",
                                            "representation": "rollout status {{rollout_id}}"})
                if self.path == "/api/v1/aliasexecution/match_and_execute":
                    if not matched:
                        return self._json(400, {"faultstring": "no match"})
                    body = req["body"]
                    self._json(201, {"results": [{
                        "execution": {"id": "exec-1", "web_url": "http://127.0.0.1/#/exec-1"},
                        "actionalias": stub.ALIAS, "message": "on it: exec-1"}]})
                    rollout = command.split()[-1]
                    stub.announce({"message": f"rollout {rollout}: done\n4/4 hosts ok",
                                   "channel": body["source_channel"], "user": body["user"],
                                   "whisper": False, "context": None, "extra": {}})
                    return None
                return self._json(404, {"faultstring": "not found"})

            def do_GET(self) -> None:
                req = self._record()
                if not self._authed(req):
                    return self._json(401, {"faultstring": "Unauthorized"})
                if self.path.startswith("/api/v1/actionalias/help"):
                    return self._json(200, {"available": 1, "helpstrings": [
                        {"pack": "fleet_rollout", "display": "rollout status <rollout_id>",
                         "description": "Show a rollout"}]})
                if self.path == "/stream/v1/stream":
                    stub.streams += 1
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream; charset=UTF-8")
                    self.send_header("Cache-Control", "no-cache")
                    self.end_headers()
                    self.wfile.write(b"\n")
                    while not stub.stopping.is_set():
                        try:
                            event = stub.events.get(timeout=0.5)
                        except queue.Empty:
                            event = ": keepalive\n\n"  # lets err-stackstorm's thread exit
                        if event is None:
                            break
                        try:
                            self.wfile.write(event.encode())
                            self.wfile.flush()
                        except OSError:
                            break
                    return None
                return self._json(404, {"faultstring": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def announce(self, payload: Dict[str, Any], route: str = "errbot") -> None:
        data = json.dumps({"payload": payload, "trace_context": None})
        self.events.put(f"event: st2.announcement__{route}\ndata: {data}\n\n")

    def find(self, method: str, path: str) -> List[Dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and r["path"] == path]

    def __enter__(self) -> St2Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(300)
def test_err_stackstorm_wire_protocol(tmp_path: Path, venv: Path, irc: ircd.IrcServer) -> None:
    state = tmp_path / "bot"
    with St2Stub() as st2:
        settings = bot.St2Settings(f"http://127.0.0.1:{st2.port}", username=BOT_USER,
                                   password=BOT_PASSWORD, route_key="errbot")
        b = bot.start(state, venv, irc.host, irc.port, CHANNEL, BOT_NICK, st2=settings)
        try:
            _wait(lambda: st2.streams >= 1, 60, "the plugin to open the stream")
            login = st2.find("POST", "/auth/v1/tokens")[0]
            assert login["body"] == {"ttl": 86400}
            stream = st2.find("GET", "/stream/v1/stream")[0]
            assert stream["headers"]["x-auth-token"] == st2.TOKEN
            assert stream["headers"]["accept"] == "text/event-stream"

            with IrcClient(irc.host, irc.port, "sre") as sre:
                sre.join(CHANNEL)

                mark = sre.say(CHANNEL, "!st2help")
                line = sre.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern="rollout status",
                                            timeout=30, since=mark)
                assert "!st2 rollout status <rollout_id> - Show a rollout" in line.plain
                assert st2.find("GET", "/api/v1/actionalias/help")

                mark = sre.say(CHANNEL, "!st2 rollout status r1")
                ack = sre.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern="on it",
                                           timeout=30, since=mark)
                assert ack.plain == "on it: exec-1"
                done: IrcLine = sre.wait_for_message(CHANNEL, from_nick=BOT_NICK,
                                                     pattern="rollout r1: done", timeout=30,
                                                     since=mark)
                assert done.target == CHANNEL
                sre.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern="4/4 hosts ok",
                                     timeout=10, since=mark)

                match = st2.find("POST", "/api/v1/actionalias/match")[0]
                assert match["body"] == {"command": "rollout status r1"}
                assert match["headers"]["content-type"] == "application/json"
                execute = st2.find("POST", "/api/v1/aliasexecution/match_and_execute")[0]
                assert execute["headers"]["x-auth-token"] == st2.TOKEN
                body = execute["body"]
                assert set(body) == {"command", "user", "notification_route", "source_channel",
                                     "notification_channel"}
                assert body["command"] == "rollout status r1"
                assert body["notification_route"] == "errbot"
                assert body["source_channel"] == body["notification_channel"] == CHANNEL
                assert body["user"].startswith("sre!") and body["user"].endswith("@127.0.0.1")

                mark = sre.say(CHANNEL, "!st2 reboot everything")
                nope = sre.wait_for_message(CHANNEL, from_nick=BOT_NICK, pattern="not found",
                                            timeout=30, since=mark)
                assert nope.plain.startswith("st2 command 'reboot everything' not found.")
                assert not [r for r in st2.find("POST", "/api/v1/aliasexecution/match_and_execute")
                            if r["body"]["command"] == "reboot everything"]

                # a whispered announcement goes to the user privately
                st2.announce({"message": "psst", "channel": CHANNEL, "user": body["user"],
                              "whisper": True})
                psst = sre.wait_for_message("sre", from_nick=BOT_NICK, pattern="psst",
                                            timeout=30, since=0)
                assert psst.target == "sre"
        except TimeoutError as err:  # what the bot did and what the stub was asked
            asked = [f"{r['method']} {r['path']}" for r in st2.requests]
            raise TimeoutError(f"{err}\n--- stub requests ---\n{asked}\n--- errbot ---\n"
                               f"{b.logs()}") from err
        finally:
            t0 = time.monotonic()
            assert bot.stop(b.pid, timeout=15)
            stop_seconds = time.monotonic() - t0
    assert stop_seconds < 15  # keepalives let the stream thread notice the shutdown
    for name in (bot.LOG_NAME, bot.CONSOLE_NAME, bot.CONFIG_NAME):
        assert BOT_PASSWORD not in (state / name).read_text(encoding="utf-8", errors="replace")


# -- the lab with ChatOps: `lab up --chatops`, approvals answered in IRC ------------------


APPROVER, OTHER = "sre-alice", "sre-mallory"


class ChatLab:
    """A sim lab started with chatops=True in tmp_path: its own runtime home, st2 users,
    st2 API (+engine), ngircd and errbot; stopped with `lab down` (by PID)."""

    def __init__(self, tmp: Path, hosts: int = 4) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.state = tmp / "lab"
        self.env = dict(os.environ, FLEET_ROLLOUT_HOME=str(self.home))
        config = lab.LabConfig(hosts=hosts, backend="sim", reboot_seconds=0.5,
                               hosts_per_rack=4, approvers=[APPROVER], chatops=True)
        lab.up(config, str(self.state), str(tmp / "inventory.yml"), progress=lambda _m: None)
        info = stack.read_info(str(self.state))
        assert info is not None, f"no {stack.INFO_NAME} in {self.state}"
        self.info = info

    def down(self) -> Dict[str, Optional[int]]:
        pids = stack.running(str(self.state))
        out = self.cli("lab", "down", "--state-dir", str(self.state))
        assert out.returncode == 0, out.stdout + out.stderr
        return pids

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleet_runtime.cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=300, cwd=str(bot.REPO))

    def st2(self, *args: str, user: str = APPROVER) -> subprocess.CompletedProcess:
        return subprocess.run([str(stack.ST2_CLI), *args], env=self.info.st2_env(user),
                              capture_output=True, text=True, timeout=300)

    def irc(self, nick: str) -> IrcClient:
        client = IrcClient(self.info.irc_host, self.info.irc_port, nick).connect()
        client.join(self.info.channel)
        return client

    def secrets(self) -> List[str]:
        return [stack.read_password(Path(self.info.st2_dir), user) for user in self.info.users]

    def profile(self) -> str:
        """A shipped profile by name (callers name profiles, never paths): lab-home-snoop asks
        for the canary batch's approval and has short canary windows."""
        return "lab-home-snoop"

    def key_values(self, prefix: str) -> List[str]:
        """The values of every key under `prefix`, in key order."""
        out = self.cli("key", "list", "--prefix", prefix, "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        items = json.loads(out.stdout) if out.stdout.strip() else []
        return [i["value"] for i in sorted(items, key=lambda i: i["name"])]

    def key(self, name: str) -> Any:
        out = self.cli("key", "get", name, "--json")
        if out.returncode != 0:
            return None
        value = json.loads(out.stdout).get("value")
        return json.loads(value) if isinstance(value, str) else value

    def pending(self) -> List[Dict[str, Any]]:
        out = self.cli("inquiry", "list", "--json")
        return json.loads(out.stdout) if out.stdout.strip() else []


@pytest.fixture
def chat_lab(tmp_path: Path, venv: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatLab]:
    monkeypatch.setenv("FLEET_ROLLOUT_HOME", str(tmp_path / "home"))  # lab.up's runtime home
    if not stack.ST2_CLI.exists():
        pytest.fail(f"{stack.ST2_CLI} is missing: `make install` creates it")
    chat = ChatLab(tmp_path)
    try:
        yield chat
    finally:
        pids = chat.down()
        for name, pid in pids.items():
            assert pid and not procs.alive(pid), f"{name} ({pid}) still runs after lab down"


def _bot_line(client: IrcClient, info: stack.ChatopsInfo, pattern: str, since: int,
              timeout: float = 120) -> IrcLine:
    return client.wait_for_message(info.channel, from_nick=info.bot_nick, pattern=pattern,
                                   timeout=timeout, since=since)


@pytest.mark.timeout(600)
def test_lab_up_chatops_status_users_and_down(chat_lab: ChatLab) -> None:
    info = chat_lab.info
    st2_dir = Path(info.st2_dir)
    assert sorted(info.users) == ["chatops_bot", APPROVER]
    assert st2_dir.stat().st_mode & 0o777 == 0o700
    for user in info.users:
        assert Path(info.st2_config(user)).stat().st_mode & 0o777 == 0o600
    pack_config = yaml.safe_load((chat_lab.home / "configs" / "fleet_rollout.yaml").read_text())
    assert (pack_config["chat_route"], pack_config["chat_channel"]) == ("errbot", CHANNEL)
    assert pack_config["approvers"] == [APPROVER]

    status = chat_lab.cli("lab", "status", "--state-dir", str(chat_lab.state))
    assert status.returncode == 0, status.stderr
    assert f"IRC {info.irc_host}:{info.irc_port}, channel {CHANNEL}" in status.stdout
    assert info.api_url in status.stdout and info.api_url.startswith("http://127.0.0.1:")
    running = stack.running(str(chat_lab.state))
    assert all(running.values()), running
    doc = json.loads(chat_lab.cli("lab", "status", "--state-dir", str(chat_lab.state),
                                  "--json").stdout)
    assert doc["chatops"]["irc_port"] == info.irc_port and doc["chatops"]["running"] == running

    # the real st2 CLI works with the config file the lab wrote (ST2_CONFIG_FILE only)
    out = chat_lab.st2("action", "get", "fleet_rollout.rollout", "-j")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["ref"] == "fleet_rollout.rollout"

    with chat_lab.irc(APPROVER) as alice:
        mark = alice.say(CHANNEL, "!st2help")
        _bot_line(alice, info, r"!st2 rollout approve", mark, timeout=60)

    texts = [status.stdout, stack.dirs(str(chat_lab.state))["info"].read_text()]
    for path in list(chat_lab.state.rglob("*.log")) + [chat_lab.state / "lab-config.json"]:
        texts.append(path.read_text(errors="replace"))
    for secret in chat_lab.secrets():
        assert all(secret not in text for text in texts)
    for pid in running.values():
        assert pid is not None
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert all(secret not in cmdline for secret in chat_lab.secrets())


@pytest.mark.timeout(900)
def test_approval_answered_in_irc_only_by_an_approver(chat_lab: ChatLab) -> None:
    info = chat_lab.info
    with chat_lab.irc(APPROVER) as alice, chat_lab.irc(OTHER) as mallory:
        start = alice.mark()
        out = chat_lab.st2("run", "fleet_rollout.rollout", f"profile={chat_lab.profile()}",
                           "-a")
        assert out.returncode == 0 and "st2 execution get" in out.stdout, out.stdout + out.stderr

        # the bot announces the canary batch's question in the channel
        question = _bot_line(alice, info, r"Approval needed for rollout \S+ \(inquiry", start)
        rollout_id = question.plain.split("rollout ", 1)[1].split()[0]
        inquiry_id = question.plain.split("(inquiry ", 1)[1].split(")")[0]
        assert [q["id"] for q in chat_lab.pending()] == [inquiry_id]

        # someone who is not an approver: refused in the channel, the rollout keeps waiting
        mark = mallory.say(CHANNEL, f"!st2 rollout approve {rollout_id}")
        refused = _bot_line(mallory, info, r"Refused", mark)
        assert OTHER in refused.plain and "not an approver" in refused.plain, refused.plain
        time.sleep(2)
        assert [q["id"] for q in chat_lab.pending()] == [inquiry_id]
        assert chat_lab.key(f"fleet_rollout.{rollout_id}.batch.0.state.approval") in (None, {})

        # the approver: accepted, recorded as that nick, the batch goes on
        mark = alice.say(CHANNEL, f"!st2 rollout approve {rollout_id}")
        answered = _bot_line(alice, info, r"answered approve", mark)
        assert answered.plain.startswith(f"{APPROVER} answered approve for rollout {rollout_id}")
        # the batch went on: the canary host changed and judged, the next question is asked
        # (lab-home-snoop's canary batch is 3 of the 4 hosts, the 4th its only control: the
        # judge says INCONCLUSIVE and asks a human)
        _bot_line(alice, info, r"\(inquiry (?!" + inquiry_id + r")\w+\)", mark, timeout=300)
        approval = chat_lab.key(f"fleet_rollout.{rollout_id}.batch.0.state.approval")
        assert (approval["by"], approval["approved"]) == (APPROVER, True), approval
        entries = [json.loads(value) for value in chat_lab.key_values(
            f"fleet_rollout.{rollout_id}.audit.")]
        assert entries and {e.get("approved_by") for e in entries} == {APPROVER}, entries


@pytest.mark.timeout(300)
def test_lab_up_chatops_refuses_a_home_whose_api_runs(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home, state = tmp_path / "home", tmp_path / "lab"
    monkeypatch.setenv("FLEET_ROLLOUT_HOME", str(home))
    home.mkdir()
    (home / stack.API_STATE_FILE).write_text(json.dumps({"pid": os.getpid()}))  # alive
    config = lab.LabConfig(hosts=1, backend="sim", approvers=[APPROVER], chatops=True)
    with pytest.raises(RuntimeError, match=r"already serves .*st2api\.json"):
        lab.up(config, str(state), str(tmp_path / "inventory.yml"), progress=lambda _m: None)
    assert lab.daemon_pid(str(state)) is None  # the lab was stopped again
    assert not any(stack.running(str(state)).values())


def test_long_messages_split_at_lines_and_spaces() -> None:
    table = "\n".join(f"{i}  site-a  lab-{i:03d}, lab-{i + 1:03d}" for i in range(20))
    long_line = "INCONCLUSIVE: " + "the judge cannot decide this batch " * 20
    text = f"Rollout r1 planned:\n{table}\n{long_line}\nend"
    parts = list(irc_split.split_message(text, 400))
    assert len(parts) > 1
    lines = [line for part in parts for line in part.split("\n")]
    assert all(len(part) <= 400 for part in parts)
    assert lines[:21] == text.split("\n")[:21]  # whole lines where they fit
    assert " ".join(lines[21:]).split() == f"{long_line}\nend".split()  # nothing lost or torn
    assert list(irc_split.split_message("", 400)) == [""]


# Sends messages from 6 threads through errbot's own IRC backend code (ErrBot's
# split_and_send_message, IRCBackend.send_message and its shared Markdown converter), with the
# lab's errbot config loaded; only the IRC connection is a recorder. Without the config's lock
# the threads interleave lines of their messages and lose some.
_CONCURRENT_SENDS = r'''
import importlib.util, json, sys, threading, types
import errbot.backends.irc as irc
from errbot.backends.base import Message
from errbot.rendering.ansiext import enable_format

spec = importlib.util.spec_from_file_location("errbot_config", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
enable_format("irc", irc.IRC_CHRS, borders=False)


class Recorder:
    def __init__(self):
        self.lines = []

    def send_public_message(self, to, line):
        self.lines.append(line)


class NoPlugins:
    def get_all_active_plugins(self):
        return []


backend = object.__new__(irc.IRCBackend)
backend.bot_config = types.SimpleNamespace(MESSAGE_SIZE_LIMIT=400)
backend.md, backend.conn, backend.plugin_manager = irc.irc_md(), Recorder(), NoPlugins()
room = types.SimpleNamespace(room="#fleet-rollout")


def send(thread):
    for i in range(60):
        msg = Message(f"t{thread} m{i}: rollout r1: done\nt{thread} m{i}: 4/4 hosts ok")
        msg.to = msg.frm = room
        backend.split_and_send_message(msg)


threads = [threading.Thread(target=send, args=(k,)) for k in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(backend.conn.lines))
'''


def test_errbot_sends_one_whole_message_at_a_time(tmp_path: Path, venv: Path) -> None:
    config = bot.write_config(tmp_path / "bot", venv, "127.0.0.1", procs.free_port())
    out = subprocess.run([str(venv / "bin" / "python"), "-c", _CONCURRENT_SENDS, str(config)],
                         capture_output=True, text=True, timeout=120, check=True)
    lines = [line.strip("\x02\x03\x0f") for line in json.loads(out.stdout)]  # IRC formatting
    assert len(lines) == len(set(lines)) == 6 * 60 * 2  # none lost, none sent twice
    for first, second in zip(lines[::2], lines[1::2]):  # each message's two lines together
        assert first.endswith(": rollout r1: done"), first
        assert second == first.replace("rollout r1: done", "4/4 hosts ok")

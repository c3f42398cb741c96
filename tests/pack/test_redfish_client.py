"""The safe client over python-redfish-library: TLS, timeouts, retries, re-login, no resends,
logout, and secrets kept out of every text. Real HTTP(S) against the BMC simulator."""
from __future__ import annotations

import json
import logging
import time

import pytest
from redfish_support import (
    PASSWORD,
    bmc_fleet,
    endpoint,
    reset_counters,
    server_requests,
    set_faults,
    state,
)

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession, WriteOutcomeUnknown
from fleet_rollout.redfish.discovery import discover


@pytest.fixture(scope="module")
def fleet():
    with bmc_fleet(["generic", "lenovo-xcc", "dell-idrac8"]) as f:
        yield f


class SleepRecorder:
    def __init__(self):
        self.calls = []

    def __call__(self, seconds):
        self.calls.append(seconds)


def test_tls_is_verified_by_default(fleet):
    ep = endpoint(fleet, 0, ca_bundle=None, get_retries=0)  # system store: lab CA unknown
    with pytest.raises(RedfishError) as err:
        RedfishSession(ep).open()
    assert "TLS verification failed" in str(err.value)


def test_plain_http_needs_explicit_permission():
    with bmc_fleet(["generic"], tls=False) as plain:
        ep = endpoint(plain, 0)
        with pytest.raises(RedfishError) as err:
            RedfishSession(ep).open()
        assert "plain http" in str(err.value)
        with RedfishSession(endpoint(plain, 0, allow_http=True)) as session:
            assert session.get("/redfish/v1/Systems").body["Members@odata.count"] == 1


def test_every_request_has_a_timeout(fleet):
    reset_counters(fleet, 0)
    set_faults(fleet, 0, latency_ms=1500)
    try:
        sleeps = SleepRecorder()
        ep = endpoint(fleet, 0, timeout=0.3, get_retries=2)
        with pytest.raises(RedfishError) as err:
            RedfishSession(ep, sleep=sleeps).open()
        assert err.value.transient and "ReadTimeout" in str(err.value)
        assert len(sleeps.calls) == 2  # two retries of the GET, with backoff between
    finally:
        set_faults(fleet, 0, latency_ms=0)
        await_served(fleet, 0, "GET", 3)


def await_served(fleet, index: int, method: str, count: int, timeout: float = 60.0,
                 quiet: float = 5.0) -> None:
    """Wait until the BMC has served the `count` requests the client gave up on: the simulator
    counts a request after its latency, so a slow answer left behind would otherwise be counted
    in whichever test uses this BMC next (xdist can run any test of this module next). A request
    whose connection timed out before the simulator accepted it is never served (in a loaded CI
    run 2 of 3 were): the count standing still for `quiet` seconds, several times the latency,
    says nothing is left in flight either."""
    deadline = time.monotonic() + timeout
    seen, since = None, time.monotonic()
    while True:
        served = state(fleet, index)["counters"].get(method, 0)
        if served >= count:
            return
        if served != seen:
            seen, since = served, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        assert time.monotonic() < deadline, state(fleet, index)["counters"]
        time.sleep(0.1)


def test_get_retries_honour_retry_after_on_503(fleet):
    sleeps = SleepRecorder()
    with RedfishSession(endpoint(fleet, 0, get_retries=4), sleep=sleeps) as session:
        set_faults(fleet, 0, unavailable=3, retry_after_s=1)
        response = session.get("/redfish/v1/Systems")
    assert response.status == 200
    assert sleeps.calls == [1.0, 1.0, 1.0]
    assert state(fleet, 0)["counters"]["503"] >= 3


def test_writes_are_never_resent_after_a_lost_answer(fleet):
    with RedfishSession(endpoint(fleet, 0)) as session:
        ctx = discover(session)
        reset_counters(fleet, 0)
        set_faults(fleet, 0, drop_after_write=1)
        with pytest.raises(WriteOutcomeUnknown):
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"}})
        assert state(fleet, 0)["counters"].get("PATCH") == 1
        assert state(fleet, 0)["pending"] == {"ProcTurboMode": "Disabled"}  # it did happen
        session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Enabled"}})
    assert state(fleet, 0)["pending"] == {}


def test_relogin_on_expired_session(fleet):
    with RedfishSession(endpoint(fleet, 0)) as session:
        session.get("/redfish/v1/Systems")
        set_faults(fleet, 0, expire_sessions=True)
        assert session.get("/redfish/v1/Systems").status == 200
        assert session.requests["POST"] == 2  # login, then login again after the 401
    assert state(fleet, 0)["sessions_active"] == 0


def test_session_logged_out_even_when_the_caller_fails(fleet):
    with pytest.raises(ZeroDivisionError):
        with RedfishSession(endpoint(fleet, 0)):
            raise ZeroDivisionError()
    assert state(fleet, 0)["sessions_active"] == 0


def test_if_match_required_and_stale_etag(fleet):
    index = 1  # Lenovo XCC answers 428 without If-Match
    with RedfishSession(endpoint(fleet, index)) as session:
        ctx = discover(session)
        with pytest.raises(RedfishError) as err:
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"}})
        assert err.value.status == 428
        with pytest.raises(RedfishError) as err:
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"}},
                          etag='"stale"')
        assert err.value.status == 412
    assert state(fleet, index)["pending"] == {}


def test_wrong_password_is_clear_and_secret_free(fleet):
    ep = endpoint(fleet, 0)
    ep._password = "Wr0ng-" + PASSWORD
    with pytest.raises(RedfishError) as err:
        RedfishSession(ep).open()
    assert "invalid credentials" in str(err.value)
    assert PASSWORD not in str(err.value) and "Wr0ng" not in str(err.value)


def test_password_and_tokens_never_in_logs_results_or_errors(fleet, caplog):
    from fleet_rollout.redfish.operations import Timeouts, apply_bios

    caplog.set_level(logging.DEBUG)
    texts = []
    ep = endpoint(fleet, 2)
    texts.append(repr(ep) + str(ep))
    set_faults(fleet, 2, unavailable=1)
    report = apply_bios(ep, {"node_interleaving": "enabled"},
                        Timeouts(graceful=5, force=5, boot=30, poll=0.1))
    texts.append(json.dumps(report))
    set_faults(fleet, 2, expire_sessions=True, drop_after_write=1)
    try:
        apply_bios(ep, {"snoop_mode": "home"}, Timeouts(graceful=5, force=5, boot=30, poll=0.1))
    except RedfishError as err:
        texts.append(str(err))
    set_faults(fleet, 2, job_failure=True)
    try:
        apply_bios(ep, {"snoop_mode": "cod"}, Timeouts(graceful=5, force=5, boot=30, poll=0.1))
    except RedfishError as err:
        texts.append(str(err))
    finally:
        set_faults(fleet, 2, job_failure=False)
    texts.extend(r.getMessage() for r in caplog.records)
    assert any("X-Auth-Token" in r.getMessage() for r in caplog.records), "debug logs captured"
    joined = "\n".join(texts)
    assert PASSWORD not in joined
    tokens = list(fleet.bmcs[2].issued_tokens)
    assert len(tokens) >= 3
    assert all(t not in joined for t in tokens)
    assert "<REDACTED>" in joined


# ---------------------------------------------------------------- auth and accounting
def test_request_count_is_what_the_server_served(fleet):
    """Every request on the wire is counted: the service root, the session login and logout."""
    from fleet_rollout.redfish.operations import Timeouts, apply_bios

    for index in (0, 2):  # a session (generic) and a Dell config job
        reset_counters(fleet, index)
        report = apply_bios(endpoint(fleet, index), {"snoop_mode": "cod"},
                            Timeouts(graceful=5, force=5, boot=30, poll=0.1))
        assert report["requests"] == server_requests(state(fleet, index)), index
        assert report["requests"]["DELETE"] >= 1  # the session logout


def test_basic_auth_when_configured_sends_no_session_requests():
    # a BMC of its own: on the module's shared one, a request an earlier test gave up on (a
    # slow-answer fault) can still be counted after the reset, one GET too many
    with bmc_fleet(["generic"]) as own:
        with RedfishSession(endpoint(own, 0, auth="basic")) as session:
            assert session.auth == "basic"
            discover(session)
        counters = state(own, 0)["counters"]
        assert "session_POST" not in counters and "session_DELETE" not in counters
        assert "DELETE" not in session.requests and "POST" not in session.requests
        assert dict(session.requests) == server_requests(state(own, 0))


def test_service_without_sessions_gets_basic_auth():
    with bmc_fleet(["generic"], faults={"no_sessions": True}) as plain:
        with RedfishSession(endpoint(plain, 0)) as session:  # auth auto
            assert session.auth == "basic"
            discover(session)
        assert "session_POST" not in state(plain, 0)["counters"]
        with pytest.raises(RedfishError) as err:
            RedfishSession(endpoint(plain, 0, auth="session")).open()
        assert "offers no sessions" in str(err.value)
        ep = endpoint(plain, 0)
        ep._password = "Wr0ng-" + PASSWORD
        with pytest.raises(RedfishError) as err:
            with RedfishSession(ep) as session:
                discover(session)
        assert "invalid credentials" in str(err.value) and PASSWORD not in str(err.value)


def test_auth_is_chosen_per_host_from_the_pack_config():
    from fleet_rollout.config import load_pack_config
    from fleet_rollout.errors import ConfigError
    from fleet_rollout.inventory import FleetHost

    config = load_pack_config({"credentials": {
        "default": {"username": "u", "password": "p"},
        "old-bmcs": {"username": "u", "password": "p", "auth": "basic"}},
        "bmc_networks": ["10.0.0.0/8"]})
    assert config.endpoint(FleetHost("a", "10.0.0.1")).auth == "auto"
    assert config.endpoint(FleetHost("b", "10.0.0.2", bmc_credential="old-bmcs")).auth == "basic"
    with pytest.raises(ConfigError) as err:
        load_pack_config({"credentials": {"x": {"username": "u", "password": "p",
                                                "auth": "digest"}}})
    assert "credentials.x.auth" in str(err.value)


def test_recent_reuses_a_read_only_until_the_next_write(fleet):
    """session.recent: a document read since the session's last write is not read again (the
    BIOS state between snapshot and stage); any write, even a failed one, forgets it. Counted
    at the BMC: no retries and a long timeout, so a slow answer on a loaded machine (5 s is the
    helpers' default) is not read twice."""
    with RedfishSession(endpoint(fleet, 0, timeout=120.0, get_retries=0)) as session:
        ctx = discover(session)  # read the Bios resource
        reset_counters(fleet, 0)
        first = session.recent(ctx.bios_uri)
        assert session.recent(ctx.bios_uri) is first
        assert state(fleet, 0)["counters"].get("GET", 0) == 0  # discovery's read, reused
        session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Disabled"}})
        after = session.recent(ctx.bios_uri)
        assert after is not first and state(fleet, 0)["counters"].get("GET") == 1
        set_faults(fleet, 0, drop_after_write=1)
        with pytest.raises(WriteOutcomeUnknown):
            session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Enabled"}})
        assert session.recent(ctx.bios_uri) is not after
        assert state(fleet, 0)["counters"].get("GET") == 2
        assert session.recent(ctx.bios_uri, max_age=0.0) is not None  # too old: read again
        assert state(fleet, 0)["counters"].get("GET") == 3
        session.patch(ctx.settings_uri, {"Attributes": {"ProcTurboMode": "Enabled"}})
    assert state(fleet, 0)["pending"] == {}


def test_stage_after_snapshot_reads_nothing_again(fleet):
    """snapshot -> stage in one session: the BIOS state is read once; the PATCH carries the
    settings ETag that read showed (lenovo-xcc, which requires If-Match, is covered end to end in
    test_redfish_personalities); only the post-PATCH check reads again (Bios + Settings)."""
    from fleet_rollout.redfish.bios import plan, snapshot, stage

    index = 2  # dell-idrac8: the job queue is part of the state
    with RedfishSession(endpoint(fleet, index)) as session:
        ctx = discover(session)
        snap = snapshot(session, ctx)
        reads = list(session.sent)
        other = "disabled" if snap.logical.get("node_interleaving") == "enabled" else "enabled"
        targets = plan(ctx, {"node_interleaving": other}, snap.attributes)
        staged = stage(session, ctx, targets, owned=set(snap.attributes))
        after = session.sent[len(reads):]
        session.post(ctx.clear_pending_uri, {})  # leave the BMC as it was
    assert staged.writes == 1 and staged.active_jobs == []
    assert [m for m, _ in after] == ["PATCH", "GET", "GET"]
    assert [p for _, p in after[1:]] == [ctx.bios_uri, ctx.settings_uri]
    assert sum(1 for m, p in reads if p == ctx.bios_uri) == 1  # discovery's read served both


def test_the_environment_proxy_is_honoured_and_read_once_per_session(monkeypatch):
    """HTTPS_PROXY and NO_PROXY decide, as requests decides per request, but are read when the
    session opens (requests otherwise reads the environment at every request: 0.5 ms of
    CPU each). A proxy that closes every connection stands in for one that cannot reach the BMC."""
    from net_support import LoopbackListener

    proxy = LoopbackListener()
    try:
        with bmc_fleet(["generic"]) as own:
            monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            with pytest.raises(RedfishError):
                RedfishSession(endpoint(own, 0, get_retries=0)).open()
            assert proxy.accepted >= 1  # the request went to the proxy
            seen = proxy.accepted
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            with RedfishSession(endpoint(own, 0)) as session:
                assert session._client._session.trust_env is False
                monkeypatch.delenv("NO_PROXY")  # read once: later requests go direct still
                discover(session)
            assert proxy.accepted == seen
    finally:
        proxy.close()


def test_a_netrc_entry_for_the_bmc_does_not_replace_the_configured_credentials(tmp_path,
                                                                               monkeypatch):
    """requests puts ~/.netrc's entry for a URL's host on every request of a session that
    trusts the environment: a basic-auth BMC session then logged in as whoever .netrc names."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login intruder password not-the-bmc-password\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with bmc_fleet(["generic"]) as own:
        with RedfishSession(endpoint(own, 0, auth="basic")) as session:
            assert session.auth == "basic"
            discover(session)  # answered: the configured credentials went on the wire

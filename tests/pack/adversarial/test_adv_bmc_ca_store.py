"""Adversarial: an empty `ca_bundle` means the SYSTEM CA store (config.schema.yaml), not certifi.

Before: an empty ca_bundle verified BMCs against certifi's bundle, so the machine's own trust
(a company CA installed in the system store, SSL_CERT_FILE) was ignored, and a CA that certifi
happens to carry was trusted for BMCs. Now the system store as OpenSSL sees it is used, and a
BMC whose certificate chains only to a CA outside it is refused.
"""
from __future__ import annotations

import os
import ssl

import pytest
from redfish_support import PASSWORD, bmc_fleet, endpoint

from fleet_rollout.errors import RedfishError
from fleet_rollout.redfish.client import RedfishSession, _cafile, system_ca_store


def _expected_system_store() -> str:
    paths = ssl.get_default_verify_paths()
    if paths.cafile and os.path.isfile(paths.cafile):
        return paths.cafile
    return "/etc/ssl/certs/ca-certificates.crt"


def test_empty_ca_bundle_resolves_to_the_system_store_not_certifi() -> None:
    import certifi

    with bmc_fleet(["generic"]) as fleet:
        for empty in (None, ""):
            ep = endpoint(fleet, 0, ca_bundle=empty)
            assert _cafile(ep) == _expected_system_store()
            assert os.path.realpath(_cafile(ep)) != os.path.realpath(certifi.where())
        assert _cafile(endpoint(fleet, 0)) == fleet.ca_path  # a given bundle wins


def test_ssl_cert_file_of_the_machine_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system store as OpenSSL is configured: SSL_CERT_FILE names it (certifi ignores it)."""
    with bmc_fleet(["generic"]) as fleet:
        monkeypatch.setenv("SSL_CERT_FILE", str(fleet.ca_path))
        assert system_ca_store() == fleet.ca_path
        with RedfishSession(endpoint(fleet, 0, ca_bundle=""), sleep=lambda s: None) as session:
            assert session.get("/redfish/v1/Systems").status == 200


def test_bmc_signed_by_a_ca_only_in_a_given_bundle_is_refused_without_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with bmc_fleet(["generic"]) as fleet:
        ep = endpoint(fleet, 0, ca_bundle="", get_retries=0)
        with pytest.raises(RedfishError) as err:
            with RedfishSession(ep, sleep=lambda s: None):
                pass
        text = str(err.value)
        assert text.startswith(f"{fleet.bmcs[0].name}: ")
        assert "TLS verification failed" in text and "ca_bundle" in text
        assert PASSWORD not in text
        with RedfishSession(endpoint(fleet, 0), sleep=lambda s: None) as session:
            assert session.root.get("Systems")  # with the bundle: trusted


def test_verification_is_never_switched_off() -> None:
    with bmc_fleet(["generic"]) as fleet:
        ep = endpoint(fleet, 0, ca_bundle=None)
        assert _cafile(ep) not in (False, None, "")

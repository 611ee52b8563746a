#!/usr/bin/env bash
# Installs the system tools some tests need, if they are missing and we can install them:
#   nft (nftables) - the TPROXY namespace test (crates/pep/tests/tproxy.rs) and the terminal's
#                    QUIC policy (crates/satstp/tests/quic_policy.rs, docs/quic.md).
#   curl           - reads the terminal's /metrics inside a namespace (crates/satstp/tests/quic_policy.rs).
#   tshark         - the Wireshark dissector tests (crates/satstp/tests/dissector.rs), which run
#                    tools/wireshark/stp.lua over pcaps the simulator and the daemons write.
#   chromium, chromium-headless-shell - the browser workload of `satstp bench link` and its tests
#                    (crates/browser): users have either Debian's full browser or its headless
#                    shell, and the two behave differently (the full one asks for /favicon.ico),
#                    so the tests run with both.
#   systemd-analyze (systemd) - the check that the shipped systemd units pass
#                    `systemd-analyze verify` (crates/satstp/tests/deploy.rs).
# Idempotent: does nothing when every tool is present. Never fails itself: when a tool cannot be
# installed (not root, no apt-get, no network) it says why; the tests that need the tool then
# fail under CI (CI set) and skip with a printed reason elsewhere.
set -u

need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v tshark >/dev/null 2>&1 || need+=(tshark)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v chromium-headless-shell >/dev/null 2>&1 || need+=(chromium-headless-shell)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)

if [ ${#need[@]} -eq 0 ]; then
    echo "install-deps: nothing to install (nft, tshark, curl, chromium, chromium-headless-shell and systemd-analyze present)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: not root; not installing ${need[*]} (tests that need them fail under CI, skip elsewhere)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: apt-get not available; not installing ${need[*]} (tests that need them fail under CI, skip elsewhere)"
    exit 0
fi
echo "install-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark's package asks whether non-root users may capture (a setuid dumpcap); answer no, so the
# install never stops at a prompt and adds no setuid binary. The tests only read pcap files.
if command -v debconf-set-selections >/dev/null 2>&1; then
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections || true
fi
if ! apt-get install -y --no-install-recommends "${need[@]}"; then
    # The package lists may be missing or stale (fresh container): refresh once and retry.
    if ! { apt-get update && apt-get install -y --no-install-recommends "${need[@]}"; }; then
        echo "install-deps: apt-get could not install ${need[*]} (tests that need them fail under CI, skip elsewhere)"
    fi
fi
exit 0

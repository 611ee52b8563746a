#!/bin/sh
# Writes deploy/container/conf/: key pairs for a terminal and a gateway (satstp keygen, run in
# the image) and their configurations for compose.yaml: the terminal listens for SOCKS5 on 1080
# and HTTP on 3128 and reaches the gateway through the link emulator (link:4433); the gateway
# serves that terminal and may reach public addresses only (the default policy). Checks both
# with `satstp check`. Run from anywhere; build the image first if it does not exist.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
conf="$here/conf"
engine=${ENGINE:-podman}
command -v "$engine" >/dev/null 2>&1 || engine=docker
image=satstp-daemons:latest
if ! "$engine" image inspect "$image" >/dev/null 2>&1; then
    "$engine" build -f "$here/Containerfile" -t "$image" "$here/../.."
fi
if [ -e "$conf" ]; then
    echo "setup: $conf exists; remove it to start over" >&2
    exit 1
fi
mkdir -p "$conf"
run() { "$engine" run --rm --user "$(id -u):$(id -g)" -v "$conf:/conf" "$image" "$@"; }
run satstp keygen --out /conf/terminal
run satstp keygen --out /conf/gateway
cat > "$conf/gateway.toml" <<EOT
[gateway]
listen = "0.0.0.0:4433"
# Relative paths are relative to this file.
private_key_file = "gateway.key"
allowed_terminals = ["$(cat "$conf/terminal.pub")"]
up_rate_bps = "1Mbps"
down_rate_bps = "10Mbps"
rtt_ms = 600
EOT
cat > "$conf/terminal.toml" <<EOT
[terminal]
socks_listen = "0.0.0.0:1080"
http_connect_listen = "0.0.0.0:3128"
gateway = "link:4433"
gateway_public_key = "$(cat "$conf/gateway.pub")"
private_key_file = "terminal.key"
up_rate_bps = "1Mbps"
down_rate_bps = "10Mbps"
rtt_ms = 600
EOT
chmod 0644 "$conf"/*.toml "$conf"/*.pub
# The daemons run as the image's satstp user: let it read the private keys.
chmod 0644 "$conf"/*.key
run satstp check /conf/gateway.toml
echo "setup: wrote $conf; now: $engine compose -f $here/compose.yaml up"

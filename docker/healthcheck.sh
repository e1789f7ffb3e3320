#!/bin/bash
# The image's HEALTHCHECK: healthy when GET /health/ready on the agent's own NLIP listener answers
# 200, which Parley does once its sandbox has warmed up and while its database answers (503
# otherwise), so a dependent service starts against an agent whose first negotiation does not pay
# for compiling the guest runtimes. The port and address come from
# PARLEY_LISTEN, as the server reads them; a wildcard address is probed on the loopback. Plain bash
# (its /dev/tcp), so the image needs no HTTP client.
set -euo pipefail
listen=${PARLEY_LISTEN:-127.0.0.1:8080}
port=${listen##*:}
host=${listen%:*}
host=${host#[}
host=${host%]}
case "$host" in
  0.0.0.0 | "") host=127.0.0.1 ;;
  ::) host=::1 ;;
esac
exec 3<>"/dev/tcp/$host/$port"
printf 'GET /health/ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
IFS=' ' read -r -t 5 version status _ <&3
[[ "$version" == HTTP/1.* && "$status" == 200 ]]
